"""The HTML report of a run: `data` (tables and series), `plots` (figures on an ax), `html` (page)."""
