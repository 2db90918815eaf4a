# Sourced by the server benchmarks (compare-redis.sh, compare-replicas.sh) from the project
# root: installs Debian's redis-server and redis-tools if either is missing, builds
# shale-server in release, and sets SHALE to its path.
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "installing Debian's redis-server and redis-tools" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server redis-tools >&2
fi
echo "building shale-server (release)" >&2
cargo build --release -q -p shale-server
SHALE=${CARGO_TARGET_DIR:-$(pwd)/target}/release/shale-server
