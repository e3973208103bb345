"""The words a query is about and where they are in a passage (search.terms): what the page marks and
the CLI's --json, the REST API and MCP give as "highlights"."""

from search.terms import content_words, highlight_spans, words


def marked(text: str, query: str) -> list[str]:
    return [text[a:b] for a, b in highlight_spans(text, query)]


def test_content_words_leave_out_function_words_and_keep_codes():
    assert content_words("the printer is jammed") == ["printer", "jammed"]
    assert content_words("What is the Wi-Fi password of room 5?") == ["wi", "fi", "password", "room", "5"]
    assert words("Invoice RE16-2041") == ["invoice", "re16", "2041"]
    assert content_words("the of is") == []


def test_highlights_are_whole_words_or_stems_never_stop_words_or_prefixes():
    text = "The printer is jammed; then them printers jam. Printing the report."
    assert marked(text, "the printer is jammed") == ["printer", "jammed", "printers", "jam"]
    assert marked("Reset your PASSWORDS here", "reset password") == ["Reset", "PASSWORDS"]
    assert marked("code RE16-A and pre16", "re16") == ["RE16"]
    assert marked("anything at all", "the is of") == []
