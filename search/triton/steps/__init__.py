"""The code of the model repository's Python steps (``triton_repo/*/1/model.py`` are thin wrappers).

Pure modules (numpy, tokenizers, Pillow only) that the export code and the tests import too, plus
``backend``, the Triton side, which only the python backend's stub imports. Nothing here may import
the rest of ``search``: the Triton image holds only this package and its two empty parents.
"""
