"""The REST API: thin FastAPI routers over ``gpudock.services``."""
