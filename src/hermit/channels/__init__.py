"""Chat channels: the seam (base), access control, reply shaping, and one adapter per platform."""
