"""OFA model code vendored from modelscope 1.40.2 (Apache-2.0); see NOTICE.md for the two edits."""
