"""What memory may hold and who may read it: path rules, privacy, provenance, audiences, the daily log."""
