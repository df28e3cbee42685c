"""The HTML report of a run: `view` (a run folder read into a `RunView`), one module per part of
the page (`header` with the verdict banner, `tables`, `series`, `quality_view`, `failures`),
`formatting`, `plots` (figures on an ax) and `html` (the page)."""
