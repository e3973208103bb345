"""The API's routers: health, search, ingest."""
