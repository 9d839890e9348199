"""The cluttered-digits recipe below its command line
(`recipes/spatial_transformer_digits.py`, `keras-attention-digits`): its
data (`data.py`) and its export for TF Serving (`export.py`)."""
