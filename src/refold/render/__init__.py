"""Render c_t, the prompt at step t, from an append-only history (seed 000, "The prompt at step t").

    c_t = p_sys ⊕ p_task ⊕ ⨁_{i=1..t}  f_i        if i <= b_t and i in S_t   (folded: one note)
                                        a_i ⊕ o_i  if i > b_t                 (as received)
                                        a_i ⊕ d_i  otherwise                  (deduplicated)

Agent-chosen folds act on top (seeds 001 and 002): a closed span is one collapsed block wherever
it lies, at once or, under the cost rule, with the next boundary move (``render.folds``); a ledger
``fold``/``drop`` of one output takes effect at the next boundary move.
The path itself is described in ``refold.render.renderer``.
"""

from .renderer import Renderer, render

__all__ = ["Renderer", "render"]
