"""The trusted side: reads observations (data only) and judges them with the hidden criteria (pytest tests)."""
