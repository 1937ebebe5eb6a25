"""The one-page picture of a run (`moe-harness view`): pure functions from rows to HTML and inline
SVG, no scripts, no network. page.py assembles the sections drawn by the modules beside it."""
