"""The science core: pure, typed functions with no database, web or Celery imports."""
