#!/usr/bin/env bash
# System packages edge_rt needs on Debian/Ubuntu (Jetson's L4T included):
#   libportaudio2 + portaudio19-dev  live audio (sounddevice; pyaudio builds against the headers)
#   jackd2                           the JACK dummy sound card the live-audio tests run on
#   systemd                          systemd-analyze, to verify the service unit
# Installs only what is missing; needs root (or sudo).
set -euo pipefail
pkgs=(libportaudio2 portaudio19-dev jackd2 systemd)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "edge_rt needs these system packages: ${missing[*]} (no apt-get here: install them by hand)" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "jackd2 jackd/tweak_rt_limits boolean false" | $SUDO debconf-set-selections
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
