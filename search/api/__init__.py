"""The REST API (`search serve`): app factory in app.py, routers in routes/."""

from search.api.app import create_app, serve

__all__ = ["create_app", "serve"]
