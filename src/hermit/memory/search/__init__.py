"""Retrieval: the hybrid search over the index, its keyword and vector legs, and the text each result shows."""
