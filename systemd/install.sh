#!/bin/sh
# Install the edge-rt systemd service (run as root on the device, from the repository root).
#
#   sudo systemd/install.sh                      # unit + config, enable (start with: systemctl start edge-rt)
#   sudo systemd/install.sh --now                # ... and start it
#   DESTDIR=/tmp/root systemd/install.sh         # stage the files only (no user, no systemctl): packaging, tests
#
# Environment: EDGE_RT_BIN (default /opt/edge-rt/venv/bin/edge-rt), EDGE_RT_ENGINES (default /opt/edge-rt/engines).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
DESTDIR=${DESTDIR:-}
EDGE_RT_BIN=${EDGE_RT_BIN:-/opt/edge-rt/venv/bin/edge-rt}
EDGE_RT_ENGINES=${EDGE_RT_ENGINES:-/opt/edge-rt/engines}
start_now=no
for arg in "$@"; do
    case "$arg" in
        --now) start_now=yes ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $arg (use --now or --help)" >&2; exit 2 ;;
    esac
done

case "$EDGE_RT_BIN$EDGE_RT_ENGINES" in
    *[!A-Za-z0-9/._+-]*) echo "install.sh: EDGE_RT_BIN and EDGE_RT_ENGINES must be plain absolute paths" >&2; exit 2 ;;
esac

if [ -z "$DESTDIR" ]; then
    [ "$(id -u)" -eq 0 ] || { echo "install.sh: run as root (sudo), or set DESTDIR to stage files" >&2; exit 1; }
    [ -x "$EDGE_RT_BIN" ] || { echo "install.sh: $EDGE_RT_BIN is not executable; install edge-rt into a venv there, or set EDGE_RT_BIN" >&2; exit 1; }
    if ! id edge-rt >/dev/null 2>&1; then
        groups=audio
        getent group video >/dev/null && groups=audio,video   # Jetson: the GPU nodes belong to video
        useradd --system --user-group --home-dir /var/lib/edge-rt --no-create-home \
            --shell /usr/sbin/nologin --groups "$groups" edge-rt
        echo "created system user edge-rt (groups: $groups)"
    fi
fi

unit_dir="$DESTDIR/etc/systemd/system"
install -d -m 0755 "$unit_dir" "$unit_dir/edge-rt.service.d" "$DESTDIR/etc/edge-rt"
install -m 0644 "$here/edge-rt.service" "$unit_dir/edge-rt.service"
cat > "$unit_dir/edge-rt.service.d/10-paths.conf" <<CONF
# Written by systemd/install.sh: where this device keeps edge-rt and its built packs.
[Service]
ExecStart=
ExecStart=$EDGE_RT_BIN serve --config /etc/edge-rt/config.toml
Environment=EDGE_RT_ENGINES=$EDGE_RT_ENGINES
CONF
if [ -e "$DESTDIR/etc/edge-rt/config.toml" ]; then
    echo "kept the existing $DESTDIR/etc/edge-rt/config.toml (new example: config.toml.example)"
    install -m 0640 "$here/config.example.toml" "$DESTDIR/etc/edge-rt/config.toml.example"
else
    install -m 0640 "$here/config.example.toml" "$DESTDIR/etc/edge-rt/config.toml"
fi

if [ -z "$DESTDIR" ]; then
    chgrp edge-rt /etc/edge-rt/config.toml
    systemctl daemon-reload
    systemctl enable edge-rt.service
    echo "check the device with: sudo -u edge-rt EDGE_RT_ENGINES=$EDGE_RT_ENGINES $EDGE_RT_BIN doctor --config /etc/edge-rt/config.toml"
    if [ "$start_now" = yes ]; then
        systemctl restart edge-rt.service
        systemctl --no-pager status edge-rt.service || true
    fi
fi
echo "installed edge-rt.service${DESTDIR:+ under $DESTDIR}"
