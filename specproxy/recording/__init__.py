"""The single sink for measurements: records, histograms, the run directory, experiment.json."""
