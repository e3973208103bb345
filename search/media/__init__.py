"""Media decoding shared by ingest and queries (a photo given as a query is read like an indexed one)."""
