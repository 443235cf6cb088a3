# Helpers that build initramfs archives from host files (sourced by
# prepare.sh and run.sh, on the host).

# Copies a file to the same path under the guest root, following links.
copy_file() { # root path
    local root=$1 path=$2
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
}

# Copies an executable or library and every shared library ldd lists for it.
# A static binary has none (ldd says "not a dynamic executable" and fails).
copy_with_libs() { # root path [guest-path]
    local root=$1 path=$2 guest_path=${3:-$2} lib
    mkdir -p "$root$(dirname "$guest_path")"
    cp -L "$path" "$root$guest_path"
    while read -r lib; do
        if [ -n "$lib" ] && [ ! -e "$root$lib" ]; then
            copy_file "$root" "$lib"
        fi
    done < <(ldd "$path" 2>/dev/null | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}')
}

# Mirrors the host's merged-/usr links (/bin -> usr/bin, ...) in the guest
# root, so library paths printed by ldd land where they resolve in the guest.
mirror_top_links() { # root
    local root=$1 dir
    for dir in bin sbin lib lib64; do
        if [ -L "/$dir" ]; then
            ln -s "$(readlink "/$dir")" "$root/$dir"
        else
            mkdir -p "$root/$dir"
        fi
    done
    mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
}

# Removes the top-level links again from an archive that is unpacked over
# the base one: the base archive has them, and the files copied through
# them already sit under usr/.
drop_top_links() { # root
    local root=$1 dir
    for dir in bin sbin lib lib64; do
        if [ -L "$root/$dir" ]; then rm "$root/$dir"; fi
    done
}

# Writes ROOT as a gzipped newc archive, atomically (readers of OUTPUT see
# the old archive or the new one, never half of one).
make_cpio() { # root output
    (cd "$1" && find . -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc --owner=0:0 --quiet) | gzip -1 >"$2.tmp.$$"
    mv "$2.tmp.$$" "$2"
}
