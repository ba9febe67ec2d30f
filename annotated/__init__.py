"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The modules are generated from the notebooks in `notebooks/` (edit those, then run `nbdev-export`);
this file, written by hand, re-exports the public API.
"""
