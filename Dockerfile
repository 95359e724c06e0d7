FROM python:3.11-slim
WORKDIR /srv/rubric
COPY pyproject.toml README.md ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
# CPU wheel by default; GPU images install the CUDA build of torch 2.13.0 instead.
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install --no-cache-dir -e .
