"""Help ▸ How speculative decoding works: the technique in a page, and where the app shows each part of it (a
tour's Help menu had only the shortcuts and the About box)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

from speculens.ui.screen import resize_within_screen

PRIMER_HTML = """
<h2>How speculative decoding works</h2>
<p>A language model writes one token per <i>pass</i>: it reads everything so far and picks the next token. A pass
over several tokens at once costs less than a pass for each: on a GPU barely more than one, since its time goes into
reading the model's weights; on a CPU more, but still less (on a 2-core CPU we measured, a pass over 16 tokens cost
as much as about 8 passes over one; <b>Teach</b> draws what your machine measures). Speculative decoding uses
that: something cheap <b>drafts</b> a few tokens ahead, and the model you chose (the <b>target</b>) <b>verifies</b>
them all in one pass.</p>
<ol>
<li><b>Draft.</b> A source proposes <i>k</i> tokens: a small <b>draft model</b> of the same family, or a draft that
costs nothing to make: <b>prompt lookup</b> (the text so far, where its last words occurred before), the
<b>n-gram cache</b> (what followed these words earlier in this and earlier answers) or an <b>n-gram map</b> built
from a corpus.</li>
<li><b>Verify.</b> The target reads the <i>k</i> drafted tokens in one pass and gives its own choice at each of
them.</li>
<li><b>Keep.</b> Drafted tokens are kept while they agree with the target's choice (greedy), or, sampling, while
they pass a test that keeps the target's distribution: rejection sampling against the draft model's
probabilities, or, for drafts that have none (lookup, n-gram), the target samples its own token and the draft is
kept where it matches. At the first that fails, the target's own token replaces it and the rest are dropped.
When all <i>k</i> pass, the target adds one more of its own. Every pass therefore adds at least one token, and up
to <i>k</i> + 1.</li>
</ol>
<p><b>The output does not change.</b> Greedy, every token is the target's own choice. Sampling, those tests (rejection
sampling: Leviathan et al. and Chen et al., 2023) make the answer's distribution exactly the target's. Only how fast it
comes changes. (Verifying a batch can round a near-tie the other way on CPU kernels: Settings ▸ <i>Bit-exact
verification</i> makes greedy output identical to plain decoding token for token; it is slower, and reloads the
target.)</p>
<p><b>When it pays.</b> If each drafted token is accepted with probability α, a pass that drafts <i>k</i> yields
(1 − α<sup><i>k</i>+1</sup>) / (1 − α) tokens on average. It pays when that is more than what the pass costs in
plain steps: drafting <i>k</i> tokens plus verifying <i>k</i> + 1 at once. On a GPU a verification of 8 costs little
more than one step; on a CPU it costs several, so drafts must be right more often. Speculens measures these costs
on your machine when it loads the models, learns α as it goes, and its <b>adaptive controller</b> picks the draft
length of every step, or decodes plainly when no draft is expected to pay (a draft model then drafts a little now
and then all the same, a <i>probe</i>, to measure again; a draft-free source needs none, since its drafts are scored
against the answer as it comes, at no cost).</p>
<p><b>Where to see it here.</b></p>
<ul>
<li><b>Live tokens</b> colours each token: green, a draft the target accepted; red and struck through, one it
rejected; orange, the target's correction; blue, its bonus token after a fully accepted draft; unmarked ("target
(no draft)" in the legend), a token from a step that drafted nothing. The <b>charts</b> below show tokens/s,
acceptance per step, the draft length chosen with the tokens each pass gave, and acceptance by position in the
draft.</li>
<li><b>Teach</b>, with <i>Step mode</i> ticked, pauses the answer after every step (F10 runs the next) and explains
it, with the curve of expected speedup by draft length that the controller chose from.</li>
<li><b>Compare</b> (Ctrl+Shift+C) answers your last message with plain decoding and with speculation side by side,
and says whether the text is identical and what the speedup was.</li>
<li><b>Pair lab</b> (Ctrl+Shift+L) measures which draft and settings make a target fastest on this machine.</li>
</ul>
"""


def show_page(parent: QWidget, title: str, page_html: str, width: int = 640, height: int = 720) -> QDialog:
    """Open a page of help (not modal: it can stay open beside the window while an answer runs), scrolled where it is
    longer than the screen allows (a tour's shortcut list ran off a 700-pixel screen, its OK button with it)."""
    dialog = QDialog(parent)
    dialog.setWindowTitle(title)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    text = QTextBrowser(dialog)
    text.setAccessibleName(title)
    text.setHtml(page_html)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, dialog)
    buttons.rejected.connect(dialog.close)
    layout = QVBoxLayout(dialog)
    layout.addWidget(text)
    layout.addWidget(buttons)
    resize_within_screen(dialog, width, height)
    dialog.show()
    return dialog
