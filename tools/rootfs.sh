#!/bin/bash
# The image's whole filesystem, assembled in the build stage: the Python interpreter and its standard
# library, the application's virtualenv, exactly the shared libraries those load (found with ldd), the
# CA certificates, a passwd entry for the numeric user and an empty /tmp. Nothing else: no shell, no
# coreutils, no pip, no package manager. The final stage is `FROM scratch` plus this tree, so a process
# that gets code execution in the container finds no tool to continue with.
#
#   tools/rootfs.sh PYTHON_PREFIX VENV DEST      e.g. tools/rootfs.sh /usr/local /opt/tls-injector /rootfs
#
# Paths are kept as they are (the venv's scripts name their interpreter by absolute path). With
# ROOTFS_LINK=1 files are hard-linked instead of copied where they can be: the test suite assembles
# a tree from its own interpreter this way and runs the entry point in it with chroot (tests/shipping).
set -euo pipefail

prefix=$1 venv=$2 dest=$3
link=()
[[ ${ROOTFS_LINK:-0} == 1 ]] && link=(-l)
version=$("$venv/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')

copy() {  # copy PATH... into $dest at the same path, symlinks followed (the loader wants files)
    for path in "$@"; do
        mkdir -p "$dest$(dirname "$path")"
        cp -L "${link[@]}" -r "$path" "$dest$path" 2>/dev/null || cp -L -r "$path" "$dest$path"
    done
}

mkdir -p "$dest"
# The interpreter: its binary, its shared library and its standard library without what ships tools
# (pip, ensurepip, idle, tkinter, the test suite) or what only a compiler would use.
copy "$prefix/bin/python$version" "$prefix/lib/python$version"
# Its shared library where the interpreter is built shared (the python image's); Debian's python3.11
# holds it in the binary, and the glob then matches nothing.
shopt -s nullglob
for library in "$prefix/lib/libpython$version"*.so*; do copy "$library"; done
shopt -u nullglob
rm -rf "$dest$prefix/lib/python$version/"{site-packages,ensurepip,idlelib,tkinter,turtledemo,test,lib2to3,config-*} \
    "$dest$prefix/lib/python$version/lib-dynload/"_tkinter*
mkdir -p "$dest$prefix/lib/python$version/site-packages"
# The application: the virtualenv without pip (the build removed it; a venv given here may hold it).
mkdir -p "$dest$(dirname "$venv")"
cp -a "${link[@]}" "$venv" "$dest$venv" 2>/dev/null || cp -a "$venv" "$dest$venv"
rm -rf "$dest$venv"/bin/pip* "$dest$venv"/lib/python*/site-packages/pip "$dest$venv"/lib/python*/site-packages/pip-*
# The venv's interpreter is a symlink to the prefix's: keep it a link, now into the tree.
ln -sf "$prefix/bin/python$version" "$dest$venv/bin/python"
ln -sf python "$dest$venv/bin/python3"
ln -sf python "$dest$venv/bin/python$version"

# Every shared library any binary or extension module here needs, and the loader itself.
find "$dest" -type f \( -name '*.so' -o -name '*.so.*' -o -path "*/bin/python$version" \) -print0 \
    | xargs -0 -r ldd 2>/dev/null \
    | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }' \
    | sort -u | while read -r library; do
        [[ -e $dest$library ]] || copy "$library"
    done

# Where the loader looks: every directory a library was put in, cached as on any system.
find "$dest" -name '*.so*' -type f -printf '%h\n' | sed "s|^$dest||" | sort -u > "$dest/ld.so.conf.tmp"
mkdir -p "$dest/etc"
mv "$dest/ld.so.conf.tmp" "$dest/etc/ld.so.conf"
ldconfig -r "$dest"

# CA certificates (for an API server whose certificate a public CA signed), the user, a temp dir.
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    copy /etc/ssl/certs/ca-certificates.crt
fi
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/nonexistent' > "$dest/etc/passwd"
echo 'nonroot:x:65532:' > "$dest/etc/group"
mkdir -p "$dest/tmp"
chmod 1777 "$dest/tmp"
