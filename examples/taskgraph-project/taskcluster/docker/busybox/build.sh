#!/bin/sh
# Builds the project's image (see the Dockerfile beside this file) into $1, a zstd-compressed
# `docker save` archive, from the worker host's static busybox (Debian: busybox-static).
set -eu
out=$1
here=$(dirname "$0")
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/builds/worker" "$root/etc"
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
echo "NAME=ci-project busybox" > "$root/etc/os-release"
IMAGE_USER_DIRS="builds/worker" IMAGE_CONFIG='{"Env":["PATH=/bin"],"WorkingDir":"/builds/worker"}' \
    sh "$here/docker-save.sh" "$root.tar" "$root"
zstd -q --rm -o "$out" "$root.tar"
