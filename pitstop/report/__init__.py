"""`pitstop report`: a run's story as pictures (timeline per node, failure-domain availability,
validation figures against baseline) in one HTML file and in Markdown with PNGs.

`layout` and `timeline` are pure (a RunReport and the plan's layout in, plot data out); `plots`
draws that data with matplotlib; `html` and `markdown` write the documents; `source` reads a
run from Temporal; `write` puts the pieces together."""
