# raftcron node / worker image: slim, non-root, with a health check.
#   docker build -t raftcron .
#   docker run -v ./n1:/data -v ./n1.toml:/etc/raftcron/node.toml:ro raftcron
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 RAFTCRON_WEB_DIR=/app/web
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin raftcron \
    && mkdir -p /data /etc/raftcron && chown raftcron:raftcron /data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY raftcron ./raftcron
COPY web ./web
RUN pip install --no-cache-dir . && rm -rf /root/.cache

USER raftcron
VOLUME ["/data"]
EXPOSE 8700 8800
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD python -c "import os,urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('RAFTCRON_HTTP_PORT', '8700') + '/healthz', timeout=2)" || exit 1
ENTRYPOINT ["raftcron"]
CMD ["node", "--config", "/etc/raftcron/node.toml"]
