"""Prompt lookup on token ids: copying, following a copy, learnt substitutions, re-indentation, confidence."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from speculens.engine.drafters.prompt_lookup import LONG_RUN, PROSE, PROSE_RESUMED, PromptLookupDrafter
from speculens.engine.vocab import VocabInfo

WS4, WS8 = 900, 901  # whitespace-only tokens: four and eight spaces of indentation
NL = 10


def follow(drafter: PromptLookupDrafter, prompt: Sequence[int], answer: Sequence[int], n: int = 8) -> list[int]:
    """Feed ``answer`` one token at a time as a target would; return how many drafted tokens each step got right."""
    drafter.begin(prompt)
    history = list(prompt)
    hits = []
    for token in answer:
        draft = drafter.draft(history, n).tokens
        i = 0
        while i < len(draft) and len(history) - len(prompt) + i < len(answer):
            if draft[i] != answer[len(history) - len(prompt) + i]:
                break
            i += 1
        hits.append(i)
        history.append(token)
    return hits


def test_it_copies_what_followed_the_suffix_in_the_prompt() -> None:
    d = PromptLookupDrafter()
    prompt = [1, 2, 3, 4, 5, 6, 7, 0, 1, 2]
    d.begin(prompt)
    assert d.draft(prompt, 4).tokens == (3, 4, 5, 6)
    assert d.draft(prompt, 0).tokens == ()
    assert d.draft([*prompt, 99], 4).tokens == ()  # 99 never occurred: nothing to copy


def test_a_copy_is_followed_rather_than_the_latest_occurrence_of_the_suffix() -> None:
    # Two lines share their last tokens; the answer copies the first one, then the line after it.
    first, second = [20, 21, 5, 6], [30, 31, 5, 6]
    prompt = [*first, 40, 41, 42, NL, *second, 50, 51, 52, NL]
    answer = [*first, 40, 41, 42]
    d = PromptLookupDrafter(ngram_max=2)  # a short suffix alone would pick the latest "5 6": the wrong line
    hits = follow(d, prompt, answer)
    assert hits[4:] == [3, 2, 1]  # after "20 21 5 6" it drafts 40 41 42 from the line it is copying


def test_a_renamed_identifier_is_learnt_and_substituted() -> None:
    items, stock = 500, 501
    line = [7, 8, items, 9, 11, 12, NL]  # "self . items [ name ] \n"
    prompt = [1, 2, NL, *line, *line, *line, *line, 3]
    answer = [t if t != items else stock for t in line * 4]
    d = PromptLookupDrafter()
    hits = follow(d, prompt, answer)
    line_hits = [hits[i * len(line) + 2] for i in range(4)]  # the drafts made just before each "items"
    assert line_hits[0] == 0  # the first rename is news
    assert all(h >= 5 for h in line_hits[2:])  # later lines are drafted with "stock" in place of "items"
    assert sum(hits) >= 0.75 * len(answer) * 3  # most of the answer came from long accepted drafts


def test_a_substitution_is_forgotten_when_the_answer_keeps_the_original() -> None:
    a, b = 600, 601
    block = [5, 6, 4, a, 7, 8, 9, NL]
    prompt = [1, *block, *block, *block, 2]
    answer = [5, 6, 4, b, 7, 8, 9, NL, 5, 6, 4, a, 7, 8, 9, NL, 5, 6, 4, a, 7, 8, 9]
    d = PromptLookupDrafter()
    hits = follow(d, prompt, answer)
    assert hits[3] == 0 and hits[11] == 0  # "a" became "b" once (learnt), then "a" came back
    # "a" is now unsure: the third block's draft stops just before it (the target decides it), then goes on.
    assert hits[19] == 0
    assert hits[20] >= 3


def test_re_indented_lines_still_find_their_source_and_take_the_new_indentation() -> None:
    # "5" starts line A and also occurs later in line B; the answer re-indents line A.
    prompt = [1, NL, WS4, 5, 6, 7, 8, NL, WS4, 3, 5, 9, 9, NL, 2]
    history = [*prompt, NL, WS8, 5]
    plain, aware = PromptLookupDrafter(), PromptLookupDrafter(whitespace={WS4, WS8})
    plain.begin(prompt)
    aware.begin(prompt)
    assert plain.draft(history, 3).tokens == (9, 9, NL)  # only "5" matches: the latest one, in line B
    assert aware.draft(history, 3).tokens == (6, 7, 8)  # "\n <indent> 5" matches line A
    # A whole block moved four spaces deeper: after the first line, the new indentation is drafted too.
    body = [[71, 72, 73, 74], [81, 82, 83, 84], [91, 92, 93, 94], [61, 62, 63, 64]]
    prompt = [1, 2, NL] + [t for b in body for t in (WS4, *b, NL)]
    answer = [t for b in body for t in (WS8, *b, NL)]
    hits = follow(PromptLookupDrafter(whitespace={WS4, WS8}, indent={WS4: 4, WS8: 8}), prompt, answer)
    assert hits[0] == 0  # the first line's indentation is news ...
    assert hits[2] == 8  # ... and, once the copy is found, line 2 is drafted four spaces deeper too


def test_an_indentation_shift_applies_at_every_depth_until_the_answer_keeps_the_source() -> None:
    ws = {900 + w: w for w in range(0, 17, 4)}  # 0..16 spaces
    i4, i8, i12 = 904, 908, 912
    # A loop with a nested body, wrapped by the answer in a block: every line four spaces deeper.
    prompt = [1, NL, i4, 70, 71, NL, i8, 80, 81, NL, i8, 82, 83, NL, i4, 90, 91, NL, 2]
    answer = [i8, 70, 71, NL, i12, 80, 81, NL, i12, 82, 83, NL, i8, 90, 91, NL]
    hits = follow(PromptLookupDrafter(whitespace=set(ws), indent=ws), prompt, answer)
    assert hits[2] == 8  # learnt at the first line, applied one level deeper, where it was never seen
    # An answer that goes back to the source's depth drops the shift: its next line is drafted as the source.
    back = [i8, 70, 71, NL, i8, 80, 81, NL, i8, 82]
    hits = follow(PromptLookupDrafter(whitespace=set(ws), indent=ws), prompt, back)
    assert hits[6] == 4  # after "i8 80": 81, NL, i8 (not i12), 82


def test_confidence_rises_as_a_copy_is_followed() -> None:
    prompt = [*range(100, 140), 7]
    d = PromptLookupDrafter()
    d.begin(prompt)
    history = list(prompt)
    history.append(100)  # the answer starts copying the prompt
    assert d.draft(history, 4).confidence == 0  # a one-token match: a guess
    seen = []
    for token in range(101, 101 + LONG_RUN + 1):
        history.append(token)
        seen.append(d.draft(history, 4).confidence)
    assert seen[0] == 2 and seen[-1] == 3


def test_an_edited_history_is_indexed_again() -> None:
    d = PromptLookupDrafter()
    d.begin([1, 2, 3, 1])
    assert d.draft([1, 2, 3, 1], 2).tokens == (2, 3)
    assert d.draft([4, 5, 6, 4], 2).tokens == (5, 6)  # a different conversation: the old index is gone


RPNL = 8  # "):\n": a token that ends a line
IMP, OS, SYS, DEF, F, G, H, LP, A, B, C, RET, X1, X2, X3, COLON, INT = range(40, 57)
SYMBOLS = {NL, RPNL, WS4, LP, COLON}  # the tokens below with no letter or digit
HEAD = [IMP, OS, NL, IMP, SYS, NL, NL]  # two import lines and a blank one, copied as they are


def function(name: int, param: int, value: int, annotated: bool = False, logged: bool = False) -> list[int]:
    """The tokens of ``def name(param):`` and a one-line body ``return value``; ``annotated`` adds ``: int`` to
    the parameter, ``logged`` a line (``colon int``) at the top of the body."""
    return [
        DEF, name, LP, param, *([COLON, INT] if annotated else []), RPNL,
        *([WS4, COLON, INT, NL] if logged else []), WS4, RET, value, NL,
    ]  # fmt: skip


def module(*functions: list[int]) -> list[int]:
    """A prompt: a line of text, the imports, then the functions with a blank line between them."""
    out = [1, 2, NL, *HEAD]
    for i, f in enumerate(functions):
        out += [*([NL] if i else []), *f]
    return [*out, 3]


def line_aware_drafts(prompt: Sequence[int], answer: Sequence[int]) -> list:
    """:func:`drafts` of a drafter that knows the line breaks and punctuation."""
    drafter = PromptLookupDrafter(whitespace={WS4}, indent={WS4: 4}, newlines={NL, RPNL}, symbols=SYMBOLS)
    return drafts(drafter, prompt, answer)


def drafts(drafter: PromptLookupDrafter, prompt: Sequence[int], answer: Sequence[int], n: int = 8) -> list:
    """The draft made before each token of ``answer``, fed one token at a time."""
    drafter.begin(prompt)
    history, out = list(prompt), []
    for token in answer:
        out.append(drafter.draft(history, n))
        history.append(token)
    return out


def test_a_kind_of_line_the_answer_edits_is_not_drafted_into() -> None:
    # Every signature gets an annotation ("a" -> "a: int"); the bodies are copied as they are.
    prompt = module(function(F, A, X1), function(G, B, X2))
    answer = [*HEAD, *function(F, A, X1, annotated=True), NL, *function(G, B, X2, annotated=True)]
    blind = drafts(PromptLookupDrafter(whitespace={WS4}, indent={WS4: 4}), prompt, answer)
    aware = line_aware_drafts(prompt, answer)
    # After the first body, a line-blind draft runs on into "def g(b)" and would fail at its annotation.
    assert blind[18].tokens[:3] == (NL, DEF, G)
    assert aware[18].tokens == (NL,)  # stops where the next signature begins: the target writes "def"
    assert aware[19].tokens == (DEF, G, LP, B, RPNL) and aware[19].confidence == 0  # inside one: a guess
    assert blind[19].confidence > 0
    # Before the first signature was edited, nothing was known: the draft went on across lines.
    assert aware[5].tokens[:3] == (NL, NL, DEF)


def test_a_kind_of_line_copied_whole_again_is_drafted_into_again() -> None:
    prompt = module(function(F, A, X1), function(G, B, X2), function(H, C, X3))
    # The first signature is annotated, the second one is copied as it is.
    answer = [*HEAD, *function(F, A, X1, annotated=True), NL, *function(G, B, X2), NL, DEF, H]
    aware = line_aware_drafts(prompt, answer)
    assert aware[18].tokens == (NL,)
    assert aware[27].tokens[:4] == (NL, NL, DEF, H)  # "def g(b):" was copied whole: signatures are copies again


def test_a_rename_does_not_make_its_kind_of_line_an_edit() -> None:
    # "a" is renamed "b" in both signatures: a substitution, not an edit of the line.
    prompt = module(function(F, A, X1), function(G, A, X2))
    answer = [*HEAD, *function(F, B, X1), NL, DEF, G]
    assert line_aware_drafts(prompt, answer)[16].tokens[:2] == (NL, DEF)


def test_a_space_inside_a_line_is_not_indentation() -> None:
    sp, ws5 = 902, 903  # one space between two words; five spaces
    ws = {WS4: 4, WS8: 8, sp: 1, ws5: 5}
    prompt = [1, NL, WS4, 60, sp, 61, NL, WS4, 62, sp, 63, NL, 2]
    answer = [NL, WS8, 60, sp, 61, NL, WS8, 62, sp, 63]  # the block indented four columns deeper
    blind = drafts(PromptLookupDrafter(whitespace=set(ws), indent=ws), prompt, answer)
    aware = drafts(PromptLookupDrafter(whitespace=set(ws), indent=ws, newlines={NL}), prompt, answer)
    assert blind[3].tokens[:1] == (ws5,)  # the shift was applied to the space between "60" and "61"
    assert aware[3].tokens[:4] == (sp, 61, NL, WS8)  # the space stays; the next line's indentation shifts


def test_the_vocabulary_names_its_line_breaks_in_bpe_and_spm_spelling() -> None:
    texts = ("def", "Ċ", "):Ċ", "ĠĠĠ", "<0x0A>", "▁x", "<|im_end|>\n")
    vocab = VocabInfo(1, len(texts), -1, 6, frozenset({6}), False, False, texts, frozenset({6}))
    assert vocab.newline_ids == {1, 2, 4}  # a special token is never a line of text
    assert vocab.indent_widths == {3: 3}


def test_a_line_inserted_before_a_line_does_not_make_its_kind_an_edit() -> None:
    # A logging line ("colon int") goes in at the top of each body; the bodies themselves are copied.
    prompt = module(function(F, A, X1), function(G, B, X2))
    answer = [*HEAD, *function(F, A, X1, logged=True), NL, DEF, G, LP, B, RPNL]
    assert line_aware_drafts(prompt, answer)[-1].tokens[:4] == (RPNL, WS4, RET, X2)


def test_after_an_edited_line_the_copy_goes_on_at_the_source_line_after_it() -> None:
    # Both signatures are annotated; the bodies are copied. Right after an edited signature, its last tokens
    # ("int ):\n") occur only in the answer's own earlier signature (or the wrong line of the prompt), so a
    # lookup would draft another function's body; the line after the one rewritten is the body to draft.
    prompt = module(function(F, A, X1), function(G, B, X2), function(H, C, X3))
    answer = [*HEAD]
    for name, param, value in ((F, A, X1), (G, B, X2), (H, C, X3)):
        answer += [*function(name, param, value, annotated=True), NL]
    out = line_aware_drafts(prompt, answer)
    bodies = [i + 1 for i, t in enumerate(answer) if t == RPNL]  # the draft made before each body
    assert [out[i].tokens[:3] for i in bodies] == [(WS4, RET, X1), (WS4, RET, X2), (WS4, RET, X3)]
    assert all(out[i].confidence == 1 for i in bodies)  # a copy resumed across an edit, as after a substitution


def test_a_departure_is_learnt_as_a_substitution_only_if_the_same_copy_resumes() -> None:
    # The answer departs from a line ("4 5 6 7" -> "4 5 6 9") and goes on with another line ("5 6 9 11 ..."),
    # not with the one it departed from: nothing tells that 7 is written 9, and a later copy keeps its 7.
    prompt = [1, NL, 4, 5, 6, 7, 8, NL, 3, 5, 6, 9, 11, 12, 13, NL, 20, 21, 7, 22, 23, 24, NL, 2]
    answer = [4, 5, 6, 9, 11, 12, 13, NL, 20, 21, 7, 22, 23, 24]
    hits = follow(PromptLookupDrafter(), prompt, answer)
    assert hits[4] == 8  # the other line was found, and its draft runs on through "20 21 7 ..."
    assert hits[9] == 5  # after "20": 21 7 22 23 24, the 7 neither replaced nor held back


def test_a_departure_inside_a_line_of_an_edited_kind_teaches_no_substitution() -> None:
    # Each signature gets a return type, "-> int" then "-> str"; the second is drafted from the first (the
    # answer's own line), departs at the type and comes back at ":\n". That is an edit, not "int" renamed
    # "str": the last body, which returns "int", is drafted whole.
    RPAREN, ARROW, SP, HINT, STR, COLONNL = range(57, 63)  # ")", "->", " ", "typing.", "str", ":\n"

    def typed(name: int, param: int, kind: int, value: int) -> list[int]:
        return [DEF, name, LP, param, RPAREN, ARROW, SP, HINT, kind, COLONNL, WS4, RET, value, NL]

    prompt = module(function(F, A, X1), function(G, B, X2), function(H, C, INT))
    answer = [*HEAD, *typed(F, A, INT, X1), NL, *typed(G, B, STR, X2), NL, *typed(H, C, INT, INT)]
    drafter = PromptLookupDrafter(whitespace={WS4}, indent={WS4: 4}, newlines={NL, RPNL, COLONNL})
    out = drafts(drafter, prompt, answer)
    assert out[len(answer) - 4].tokens[:4] == (WS4, RET, INT, NL)


def test_a_dropped_line_does_not_put_the_copy_a_line_behind() -> None:
    # Twelve indented lines; the answer drops the second. Every line starts with the same indentation, which
    # tells nothing about which line the answer rewrote: each later line is still drafted whole.
    lines = [[WS4, 100 + 10 * i, 101 + 10 * i, 102 + 10 * i, NL] for i in range(12)]
    prompt = [1, NL, *[t for line in lines for t in line], 2]
    answer = [t for line in lines[:1] + lines[2:] for t in line]
    hits = follow(PromptLookupDrafter(whitespace={WS4}, indent={WS4: 4}, newlines={NL}), prompt, answer)
    assert [hits[i] for i in range(10, len(answer) - 5, 5)] == [8] * 8  # from the third line to the last but one


def test_a_rename_in_signatures_the_answer_also_annotates_is_still_learnt() -> None:
    # "items" becomes "stock" in every signature and body; every signature also gets ": int" (an edited kind
    # of line). The rename is learnt all the same, and the last body is drafted with "stock".
    items, stock = 61, 62

    def fn(name: int, param: int, annotated: bool) -> list[int]:
        return [DEF, name, LP, param, *([COLON, INT] if annotated else []), RPNL, WS4, RET, param, NL, NL]

    names = (F, G, H, A, B, C)
    prompt = module(*[fn(n, items, False) for n in names])
    answer = [*HEAD, *[t for n in names for t in fn(n, stock, True)]]
    out = line_aware_drafts(prompt, answer)
    assert out[len(answer) - 5].tokens[:4] == (WS4, RET, stock, NL)


def test_a_line_rewritten_at_its_first_word_is_drafted_from_its_own_source_line() -> None:
    # Every print("...") becomes logging.error("..."): each message is the one in the line being rewritten,
    # while the suffix `logging.error("` occurs last in the answer's own earlier line, with the other message.
    PRINT, LOGGING, ERROR, LQ, RQ, M1A, M1B, M2A, M2B = range(70, 79)  # print ("  ") .error and two messages
    prompt = [1, NL, WS4, PRINT, LQ, M1A, M1B, RQ, NL, WS4, RET, X1, NL, WS4, PRINT, LQ, M2A, M2B, RQ, NL]
    prompt += [WS4, RET, X2, NL, 2]
    answer = [WS4, LOGGING, ERROR, LQ, M1A, M1B, RQ, NL, WS4, RET, X1, NL, WS4, LOGGING, ERROR, LQ, M2A, M2B, RQ]
    answer += [NL, WS4, RET, X2, NL]
    out = line_aware_drafts(prompt, answer)
    second = answer.index(M2A)
    assert out[second].tokens[:5] == (M2A, M2B, RQ, NL, WS4)  # the second message, and the line after it
    assert out[second].confidence == 1  # a copy resumed inside its line, as after a substitution


def test_a_replaced_first_word_is_left_to_the_target_and_the_line_resumed_after_it() -> None:
    # Every print("...") becomes logging.error("...") or logging.info("..."): once the first one was rewritten,
    # a draft stops before the next "print" (the target writes "logging", then ".info" or ".error", which no
    # copy knows), and once as many tokens as the first time are written, the rest of its source line follows.
    PRINT, LOGGING, ERROR, INFO, LQ, RQ = range(70, 76)
    messages = [[80, 81], [82, 83], [84, 85]]
    prompt, answer = [1, NL, DEF, F, LP, A, RPNL], [DEF, F, LP, A, RPNL]
    for i, (message, level) in enumerate(zip(messages, (ERROR, INFO, ERROR), strict=True)):
        prompt += [WS4, PRINT, LQ, *message, RQ, NL, WS4, RET, X1 + i, NL]
        answer += [WS4, LOGGING, level, LQ, *message, RQ, NL, WS4, RET, X1 + i, NL]
    prompt.append(2)
    out = line_aware_drafts(prompt, answer)
    second = answer.index(INFO) - 2  # the second logging line's indentation
    assert out[second - 3].tokens == (RET, X1, NL, WS4)  # the first body line, up to the next "print"
    assert out[second + 2].tokens == ()  # after "logging": the level is the answer's
    assert out[second + 3].tokens[:4] == (LQ, 82, 83, RQ)  # after "logging.info": the rest of its print line
    assert out[second + 3].confidence == 2
    # Before the first rewrite nothing was known: the draft ran on into "print" (and failed there).
    assert out[4].tokens[:3] == (RPNL, WS4, PRINT)


def test_a_copy_resumed_inside_its_source_line_takes_that_line_s_indentation() -> None:
    # The answer's second logging line, at the source's depth, begins like the answer's own first one, which is
    # deeper: the match there must not leave the lines after it drafted at that depth.
    PRINT, LOGGING, ERROR, LQ, RQ, IF = range(70, 76)
    first, second = [IF, RPNL, WS8, PRINT, LQ, 80, RQ, NL], [WS4, PRINT, LQ, 82, RQ, NL]
    rest = [WS4, IF, RPNL, WS8, RET, X1, NL]
    prompt = [1, NL, *first, *second, *rest, 2]
    answer = [*first[:3], LOGGING, ERROR, *first[4:], WS4, LOGGING, ERROR, *second[2:], *rest]
    drafter = PromptLookupDrafter(whitespace={WS4, WS8}, indent={WS4: 4, WS8: 8}, newlines={NL, RPNL})
    out = drafts(drafter, prompt, answer)
    assert out[answer.index(82)].tokens[:8] == (82, RQ, NL, *rest[:5])  # "return" at eight spaces, as in the source


def test_a_copy_of_the_answer_s_own_text_stays_below_a_copy_of_the_prompt() -> None:
    prompt = [1, *range(100, 120), 2]
    answer = [*range(100, 120), 3, *range(100, 118)]  # the prompt's text, then the answer's own copy of it
    drafter = PromptLookupDrafter()
    out = drafts(drafter, prompt, answer)
    assert out[15].confidence == 4  # sixteen tokens into a copy of the prompt
    assert out[21 + 15].tokens[:2] == (115, 116)  # as far into the answer's copy of its own text, drafted ...
    assert out[21 + 15].confidence == 3  # ... below a long copy of the prompt


def test_a_line_inserted_before_a_replaced_first_word_is_not_taken_for_its_replacement() -> None:
    # print -> logging.error is learnt on the first line; before the second print line the answer inserts a line
    # of its own ("x = int"), two tokens long like "logging .error": it is not the print line's replacement.
    PRINT, LOGGING, ERROR, LQ, RQ, X, EQ = range(70, 77)
    prompt = [1, NL, DEF, F, LP, A, RPNL, WS4, PRINT, LQ, 80, 81, RQ, NL, WS4, RET, X1, NL]
    prompt += [WS4, PRINT, LQ, 82, 83, RQ, NL, 2]
    answer = [DEF, F, LP, A, RPNL, WS4, LOGGING, ERROR, LQ, 80, 81, RQ, NL, WS4, RET, X1, NL]
    answer += [WS4, X, EQ, INT, NL, WS4, LOGGING, ERROR, LQ, 82, 83, RQ, NL]
    out = line_aware_drafts(prompt, answer)
    inserted = answer.index(X)
    assert out[inserted + 2].tokens[:1] != (LQ,)  # after "x =": not the rest of the print line, '("82 83")'


def renamed(lines: list[list[int]], old: int, new: Sequence[int]) -> tuple[list[int], list[int]]:
    """A prompt of a lead-in line and ``lines``, and an answer that copies them with ``old`` written ``new``."""
    source = [t for line in [[50, 51, 52, NL], *lines] for t in line]
    return [1, 2, NL, *source, 3], [t for s in source for t in (new if s == old else (s,))]


@pytest.mark.parametrize("length", [2, 3, 4])
def test_a_name_renamed_to_a_longer_one_is_learnt_and_drafted_whole(length: int) -> None:
    # "cnt" becomes "item _count" (one token written as two, or three, or four) wherever it occurs in a line.
    cnt, item, count = 600, 601, 602
    lines = [[WS4, 70 + i, 80 + i, cnt, 90 + i, 100 + i, 110 + i, NL] for i in range(6)]  # "total += cnt * x"
    prompt, answer = renamed(lines, cnt, (item, *range(count, count + length - 1)))
    hits = follow(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL}), prompt, answer)
    before = [i for i, t in enumerate(answer) if t == item]  # the draft made just before each "item"
    assert hits[before[0]] == 0  # the first rename is news
    assert all(hits[i] >= 6 for i in before[2:])  # then "item _count" and the rest of the line are drafted
    # Learnt one token for one only (as when "item" and "_count" are punctuation), the copy is lost at each.
    one_for_one = follow(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={item, count}), prompt, answer)
    assert all(one_for_one[i] < 6 for i in before)
    assert sum(hits) > 1.5 * sum(one_for_one)


def shortened(lines: list[list[int]], old: Sequence[int], new: Sequence[int]) -> tuple[list[int], list[int]]:
    """A prompt of a lead-in line and ``lines``, and an answer that copies them with the name ``old`` (several
    tokens) written ``new``."""
    source = [t for line in [[50, 51, 52, NL], *lines] for t in line]
    answer, i = [], 0
    while i < len(source):
        if tuple(source[i : i + len(old)]) == tuple(old):
            answer += new
            i += len(old)
        else:
            answer.append(source[i])
            i += 1
    return [1, 2, NL, *source, 3], answer


SHORTER = [((601, 602), [600]), ((601, 602, 603), [600]), ((601, 602, 603), [600, 604])]


@pytest.mark.parametrize(("old", "new"), SHORTER)
def test_a_name_renamed_to_a_shorter_one_is_learnt_and_drafted_whole(old: tuple[int, ...], new: list[int]) -> None:
    # "item _count" becomes "n" (two tokens written as one, or three as one, or three as two) wherever it occurs.
    lines = [[WS4, 70 + i, 80 + i, *old, 90 + i, 100 + i, 110 + i, NL] for i in range(6)]  # "total += item_count * x"
    prompt, answer = shortened(lines, old, new)
    hits = follow(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL}), prompt, answer)
    before = [i for i, t in enumerate(answer) if t == new[0]]  # the draft made just before each new name
    assert hits[before[0]] == 0  # the first rename is news
    assert all(hits[i] >= min(6, len(answer) - i) for i in before[2:])  # then the name and the rest of the line
    # Where the old name's first token occurs without the rest of it, it is drafted as it is.
    prompt, answer = shortened([*lines, [WS4, 120, old[0], 121, 122, 123, 124, NL]], old, new)
    drafter = PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL})
    out = drafts(drafter, prompt, answer)
    assert out[answer.index(120)].tokens[:3] == (120, old[0], 121)


def test_a_shorter_name_is_not_learnt_over_punctuation_and_is_forgotten_when_the_answer_keeps_the_old() -> None:
    a, b, comma, n = 601, 602, 603, 600
    # "f(a, b)" written "f(n)": ", b" is punctuation and a word, not the rest of a name.
    lines = [[WS4, 70 + i, 80 + i, a, comma, b, 90 + i, 100 + i, NL] for i in range(6)]
    prompt, answer = shortened(lines, (a, comma, b), (n,))
    out = drafts(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL, comma}), prompt, answer)
    assert all(n not in d.tokens for d in out)
    # "a b" written "n" three times, then "a b" again: after that, "a b" is drafted as it is, not "n".
    lines = [[WS4, 70 + i, 80 + i, a, b, 90 + i, 100 + i, NL] for i in range(8)]
    prompt, renamed_answer = shortened(lines[:3], (a, b), (n,))
    kept = [t for line in lines[3:] for t in line]
    prompt = [1, 2, NL, *[t for line in [[50, 51, 52, NL], *lines] for t in line], 3]
    answer = [*renamed_answer, *kept]
    out = drafts(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL}), prompt, answer)
    last_a = len(answer) - len(lines[-1]) + 3  # the last line's "a"
    assert all(n not in d.tokens for d in out[len(renamed_answer) + len(lines[3]) :])
    assert out[last_a + 1].tokens[:2] == (b, 97)  # "b" is no longer dropped


def test_a_deleted_word_is_no_shorter_name() -> None:
    # "a b" written "b" once (a word deleted), then kept: nothing is learnt, so "a b" is drafted on later lines.
    a, b = 601, 602
    lines = [[WS4, 70 + i, 80 + i, a, b, 90 + i, 100 + i, NL] for i in range(6)]
    prompt, _ = shortened(lines, (a, b), (a, b))
    answer = [50, 51, 52, NL, *[t for i, line in enumerate(lines) for t in line if not (i == 0 and t == a)]]
    out = drafts(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL}), prompt, answer)
    last = len(answer) - len(lines[-1])  # the last line's indentation
    assert out[last].tokens[:5] == (WS4, 75, 85, a, b)


def test_a_shorter_name_drops_its_rest_only_where_the_copy_came_through_it() -> None:
    # Overlapping shorter names, "a b" -> n and "b c" -> m: where the source has "a b c", the answer writes "n c".
    a, b, c, n, m = 601, 602, 605, 600, 606
    lines = [
        *[[WS4, 70 + i, a, b, 90 + i, NL] for i in range(4)],
        *[[WS4, 170 + i, b, c, 190 + i, NL] for i in range(4)],
        *[[WS4, 270 + i, a, b, c, 290 + i, 291 + i, NL] for i in range(3)],
    ]
    prompt, _ = shortened(lines, (a, b), (a, b))
    renamed = []
    for line in [[50, 51, 52, NL], *lines]:
        i = 0
        while i < len(line):
            pair = tuple(line[i : i + 2])
            renamed.append(n if pair == (a, b) else m if pair == (b, c) else line[i])
            i += 2 if pair in ((a, b), (b, c)) else 1
    drafter = PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL})
    out = drafts(drafter, prompt, renamed)
    last = len(renamed) - 5  # the last line: "WS4 272 n c 292 293 NL"
    assert renamed[last - 1 : last + 2] == [272, n, c]
    assert out[last].tokens[:3] == (n, c, 292)
    # "a b" -> n learnt, then the answer writes the old name in a line of its own (no copy followed): a lookup
    # after "a" finds the source's "a b" and drafts "b", which only a copy through a renamed "a" leaves out.
    lines = [[WS4, 70 + i, 80 + i, a, b, 90 + i, 100 + i, NL] for i in range(5)]
    prompt, renamed = shortened(lines[:4], (a, b), (n,))
    prompt, _ = shortened(lines, (a, b), (a, b))
    own = [WS4, 400, 401, 402, 403, 404, a]
    answer = [*renamed, *own, b, 405, NL]
    out = drafts(PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL}), prompt, answer)
    assert out[len(renamed) + len(own)].tokens[:2] == (b, 94)


def test_two_shorter_names_sharing_their_first_token_are_both_learnt() -> None:
    # "user _id" becomes "uid" and "user _name" becomes "name", on alternate lines: each is its own name, so
    # neither makes the other look replaced in two ways (which would stop every draft at "user").
    user, id_, name_, uid, name = 601, 602, 603, 600, 604
    lines = [[WS4, 70 + i, 80 + i, user, id_ if i % 2 else name_, 90 + i, 100 + i, NL] for i in range(10)]
    source = [t for line in [[50, 51, 52, NL], *lines] for t in line]
    answer, i = [], 0
    while i < len(source):
        pair = tuple(source[i : i + 2])
        answer.append(uid if pair == (user, id_) else name if pair == (user, name_) else source[i])
        i += 2 if pair in ((user, id_), (user, name_)) else 1
    drafter = PromptLookupDrafter(whitespace={WS4}, newlines={NL}, symbols={WS4, NL})
    hits = follow(drafter, [1, 2, NL, *source, 3], answer)
    before = [i for i, t in enumerate(answer) if t in (uid, name)]  # the draft made just before each new name
    assert all(hits[i] >= min(6, len(answer) - i) for i in before[4:])  # each seen twice: drafted through


def test_a_longer_name_at_a_line_s_first_word_is_drafted_once_confirmed() -> None:
    # Lines that begin with the renamed name: first a replaced first word (the target writes it), then, once
    # the same replacement was written twice, a rename drafted through like any other.
    cnt, item, count = 600, 601, 602
    lines = [[WS4, cnt, 70 + i, 80 + i, 90 + i, NL] for i in range(6)]  # "    cnt += 1"
    prompt, answer = renamed(lines, cnt, (item, count))
    drafter = PromptLookupDrafter(whitespace={WS4}, indent={WS4: 4}, newlines={NL}, symbols={WS4, NL})
    out = drafts(drafter, prompt, answer)
    heads = [i for i, t in enumerate(answer) if t == item]
    assert out[heads[1]].tokens == ()  # the second line: the target writes its first word
    assert out[heads[3]].tokens[:5] == (item, count, 73, 83, 93)


def test_a_token_inserted_before_the_source_s_is_no_longer_name() -> None:
    # "f(p, a)" written "f(p, x y a)" on every line: "x y" goes in before "a", which is no longer name "x y a".
    # The last line, where "a" occurs after "5 6", is drafted with "a" as it is.
    a, x, y = 600, 601, 602
    lines = [[70 + i, 80 + i, 90 + i, a, 100 + i, NL] for i in range(4)]
    source = [t for line in lines for t in line]
    prompt = [1, 2, NL, 50, 51, 52, NL, *source, 5, 6, a, 7, 8, NL, 3]
    answer = [50, 51, 52, NL, *[t for s in source for t in ((x, y, a) if s == a else (s,))], 5, 6, a, 7, 8, NL]
    drafter = PromptLookupDrafter(newlines={NL}, symbols={NL})
    drafter.begin(prompt)
    history = list(prompt)
    for i, token in enumerate(answer[:-4]):  # a line at a time, as after accepted drafts: no lookups inside one
        if i == 0 or history[-1] == NL:
            drafter.draft(history, 8)
        history.append(token)
    assert drafter.draft(history, 8).tokens[:3] == (a, 7, 8)


def test_the_vocabulary_knows_its_punctuation() -> None:
    texts = ("def", "Ġ=", "):Ċ", "ĠĠĠ", "_count", "(cnt", "Ġx1", "<|im_end|>", ".", "čĊ", "<0x0A>", "<0x41>", "_")
    vocab = VocabInfo(2, len(texts), -1, 7, frozenset({7}), False, False, texts, frozenset({7}))
    # A space's Ġ is no letter; a special token is never punctuation; a byte token is its byte; "_" is in names.
    assert vocab.symbol_ids == {1, 2, 3, 8, 9, 10}


def test_a_corrected_word_resumes_the_copy_right_after_it() -> None:
    # A paragraph copied with its typos corrected: "tech ique" written "technique" (two tokens as one), and
    # "ac urate" written "accurate". The copy goes on after each, with nothing learnt: the draft made right after
    # the corrected word's next token continues the paragraph, rather than the source's "ique ...".
    tech, ique, technique, ac, urate, accurate = 600, 601, 602, 603, 604, 605
    words = [*range(100, 110), tech, ique, *range(110, 130), ac, urate, *range(130, 140)]
    prompt = [1, 2, NL, *words, NL, 3]
    fixed = {tech: (technique,), ique: (), ac: (accurate,), urate: ()}
    answer = [t for w in words for t in fixed.get(w, (w,))]
    out = drafts(PromptLookupDrafter(newlines={NL}, symbols={NL}), prompt, answer)
    after = answer.index(technique) + 2  # the draft made once "technique 110" is written
    assert out[after].tokens[:4] == (111, 112, 113, 114) and out[after].confidence == PROSE  # a copy begun in prose
    after = answer.index(accurate) + 2
    assert out[after].tokens[:4] == (131, 132, 133, 134)


def test_words_inserted_before_a_token_resume_the_copy_after_it() -> None:
    # "a b c" written "a x b c": once "b c" follows "x", the copy goes on from "c", though nothing is learnt.
    words = list(range(100, 130))
    prompt = [1, 2, NL, *words, NL, 3]
    answer = [t for w in words for t in ((700, w) if w == 110 else (w,))]
    out = drafts(PromptLookupDrafter(newlines={NL}, symbols={NL}), prompt, answer)
    after = answer.index(700) + 3  # "x b c" written
    assert out[after].tokens[:3] == (112, 113, 114) and out[after].confidence > 0


def test_a_copy_of_the_answer_s_own_blank_line_is_only_a_guess() -> None:
    """The suite's code-generation prompt: a docstring's blank line before ``Returns:`` matched the answer's own
    blank line before ``Args:`` (``.⏎`` ``····⏎`` found it, ``···`` followed it), and two drafts of 15 tokens with
    the confidence of a copy begun were rejected at their first token."""
    args, returns, colon, x, y, dot_nl, blank_nl = 50, 60, 51, 52, 53, 11, 12
    answer = [70, dot_nl, blank_nl, WS4, args, colon, NL, WS4, x, y, dot_nl, blank_nl, WS4, returns, colon]
    lookup = PromptLookupDrafter(whitespace={WS4, NL, blank_nl}, indent={WS4: 4}, newlines={NL, dot_nl, blank_nl})
    out = drafts(lookup, [1, 2, 3], answer)
    before_returns = out[answer.index(returns)]
    assert before_returns.tokens[:2] == (args, colon)  # still drafted: the controller learns such guesses apart
    assert before_returns.confidence == 0
    # The same blank line copied from the prompt is a copy begun, as before.
    lookup = PromptLookupDrafter(whitespace={WS4, NL, blank_nl}, indent={WS4: 4}, newlines={NL, dot_nl, blank_nl})
    out = drafts(lookup, answer[:10], answer[10:])
    assert out[3].tokens[:2] == (args, colon) and out[3].confidence == 2


def test_a_copy_just_begun_in_prose_is_learnt_apart_from_one_in_code() -> None:
    """A recorded multi-turn rename: after the code, the answer's prose began like the earlier answer's ("In this
    solution, the variable…") and went its own way; pooled with the code's copies, six drafts of 15 tokens were
    rejected within two tokens. A copy begun in a line of prose has a class of its own; one in code keeps 2."""
    comma, dot, tick = 40, 41, 42
    prose = [NL, 100, 101, comma, 102, 103, tick, 104, tick, *range(105, 112), dot, NL]  # 12 words, 4 marks
    code = [NL, 200, 201, dot, 202, comma, 203, tick, 204, NL]  # code: 5 words, 4 marks
    lookup = PromptLookupDrafter(newlines={NL}, symbols={NL, comma, dot, tick})
    in_prose = drafts(lookup, [1, *prose, *code], [100, 101, comma])[2]  # "In" found, "this" followed
    assert in_prose.tokens[:2] == (comma, 102)
    in_code = drafts(lookup, [1, *prose, *code], [200, 201, dot])[2]
    assert in_code.tokens[:2] == (dot, 202)
    assert in_prose.confidence == PROSE and in_code.confidence == 2
    # Without symbols known, no line is told to be prose.
    assert drafts(PromptLookupDrafter(newlines={NL}), [1, *prose], [100, 101, comma])[2].confidence == 2


def test_a_copy_of_prose_resumed_across_a_departure_is_learnt_apart() -> None:
    """A follow-up that renamed a function, then explained the change: class 1 had learnt from the code that a
    copy resumes after a renamed token, and eight 15-token drafts of the earlier answer's explanation, each
    assuming one more substitution, were rejected at their first token."""
    comma, dot = 40, 41
    prose = [NL, *range(100, 112), dot, NL]  # a sentence: 12 words, one full stop
    code = [NL, 200, 201, comma, 202, dot, 203, NL]
    lookup = PromptLookupDrafter(newlines={NL}, symbols={NL, comma, dot})
    # Each follows three tokens of its line, writes another in place of the fourth, and goes on with the fifth.
    in_prose = drafts(lookup, [1, *prose, *code], [100, 101, 102, 999, 104])[4]
    assert in_prose.tokens[:2] == (104, 105)
    in_code = drafts(lookup, [1, *prose, *code], [200, 201, comma, 999, dot])[4]
    assert in_code.tokens[:2] == (dot, 203)
    assert in_prose.confidence == PROSE_RESUMED and in_code.confidence == 1
