"""The run folder: layout and atomic I/O, names, secrets, records, variant status. The only thing readers of a run see."""
