"""Celery workers (default and gpu queues) arrive with the worker issue; they will call app services only."""
