"""The report model: one schema, versioned, read by every renderer."""
