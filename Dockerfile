# The indexer: one image for every `indexer` command (migrate, plan, work, monitor, status...).
FROM python:3.11-slim AS build
# A C compiler for the extensions, the root checks and the rows (scripts/build_native.py); the
# image that runs takes only the built wheel.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY scripts/build_native.py ./scripts/
COPY indexer ./indexer
COPY schema ./schema
# The dependencies at the versions the test suite passed with, not the newest the ranges allow.
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt .

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 indexer
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
USER indexer
WORKDIR /home/indexer
# /metrics listens on loopback unless told otherwise; in a container it must be reachable.
ENV INDEXER_METRICS_HOST=0.0.0.0
EXPOSE 9400
ENTRYPOINT ["indexer"]
CMD ["--help"]
