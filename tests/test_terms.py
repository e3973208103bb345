"""The words a query is about and where they are in a passage (search.terms): what the page marks and
the CLI's --json, the REST API and MCP give as "highlights"."""

from pathlib import Path

from search.terms import content_words, highlight_spans, query_stems, stem, words


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


def test_inflected_forms_are_marked_by_their_stem():
    assert marked("Using mice in labs; the mouse was used.", "using mice") == ["Using", "mice", "used"]
    assert marked("He was dying; she is lying, they died and lied.", "die lie") == ["dying", "lying", "died", "lied"]
    assert marked("dies, lies, ties and tying", "dying lying tie") == ["dies", "lies", "ties", "tying"]
    assert marked("We use it. It is useful, the user uses it.", "use") == ["use", "useful", "uses"]
    assert marked("happy and happily, the happiness", "happy") == ["happy", "happiness"]


def test_a_function_word_inflected_is_still_a_function_word():
    assert marked("some others and the other one", "others") == []
    assert marked("some others and the other one", "other ones") == ["one"]
    assert marked("The others' cats", "others cats") == ["cats"]


def test_every_word_is_found_by_its_own_stem():
    # The text is searched only where a word starts like the stem: every word of the docs must be there.
    docs = Path(__file__).parent.parent / "docs"
    vocab = {w for p in docs.glob("*.md") for w in words(p.read_text())} | {"dying", "lying", "tying", "using"}
    missed = [w for w in sorted(vocab) if stem(w) in query_stems(w) and marked(w, w) != [w]]
    assert missed == []
