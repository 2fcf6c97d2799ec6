# raftcron node / worker image: non-root, with a health check.
#   docker build -t raftcron .                                  # base: python:3.11-slim
#   docker build --build-arg BASE=localhost/rc-base -t raftcron . # any Debian 12 with python3
# Air-gapped: `pip wheel -w dist/wheels .` first; the build then installs only from there.
# Running it: see deploy/compose.yaml and the README's "Deploy" section.
ARG BASE=python:3.11-slim
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 RAFTCRON_WEB_DIR=/opt/raftcron/web
# uid/gid 10001: `raftcron deploy init --uid 10001` makes the secret and tokens readable by it.
RUN echo 'raftcron:x:10001:' >> /etc/group \
    && echo 'raftcron:x:10001:10001:raftcron:/data:/usr/sbin/nologin' >> /etc/passwd \
    && mkdir -p /data /etc/raftcron && chown 10001:10001 /data && chmod 0700 /data

# The build context holds only what .dockerignore lets through: the package, the status
# page and, when present, the wheelhouse dist/wheels.
COPY . /opt/raftcron/src
RUN python3 -m venv /opt/raftcron/venv \
    && if [ -d /opt/raftcron/src/dist/wheels ]; then \
         /opt/raftcron/venv/bin/pip install --no-cache-dir --no-index \
             --find-links /opt/raftcron/src/dist/wheels raftcron; \
       else \
         /opt/raftcron/venv/bin/pip install --no-cache-dir /opt/raftcron/src; \
       fi \
    && cp -r /opt/raftcron/src/web /opt/raftcron/web \
    && rm -rf /opt/raftcron/src /root/.cache \
    && ln -s /opt/raftcron/venv/bin/raftcron /usr/local/bin/raftcron

USER raftcron
WORKDIR /data
VOLUME ["/data"]
# Healthy: this node's own /healthz answers, at the address its config gives it.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/opt/raftcron/venv/bin/python", "-c", "import sys, urllib.request; from raftcron.config import load_config; urllib.request.urlopen(load_config(sys.argv[1]).http_url + '/healthz', timeout=3)", "/etc/raftcron/node.toml"]
ENTRYPOINT ["raftcron"]
CMD ["node", "--config", "/etc/raftcron/node.toml"]
