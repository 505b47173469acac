#!/usr/bin/env bash
# Makes a Debian 12 base image for building the Dockerfile with podman where no image
# registry is reachable, only Debian's apt mirror (as `make test-image` does):
#
#   scripts/podman-base.sh [IMAGE]     (default IMAGE: localhost/attnserve-base:bookworm)
#
# IMAGE, unless podman already has it: Debian 12 made with
# `debootstrap --variant=minbase bookworm` from the apt mirror this machine uses (read
# from /etc/apt/sources.list*), slimmed as debian:bookworm-slim is (no docs, man pages
# or locales; apt keeps no package lists or .debs), with this machine's bookworm,
# bookworm-updates and bookworm-security sources, imported with `podman import`. Build
# the Dockerfile on it with `--build-arg BASE_IMAGE=IMAGE` (its default base,
# debian:bookworm-slim, comes from Docker Hub).
#
# It changes nothing on the host but podman's image store. Idempotent; `podman rmi
# IMAGE` makes the next run debootstrap a fresh base (e.g. for security updates).
# Needs root (through sudo when not root), podman and debootstrap
# (scripts/install-deps.sh installs them). Each step is bounded in time.
set -euo pipefail

image="${1:-localhost/attnserve-base:bookworm}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
say() { echo "podman-base: $*"; }
die() {
  echo "podman-base: FAIL: $*" >&2
  exit 1
}

for tool in podman debootstrap python3; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
    die "$tool is not installed (scripts/install-deps.sh installs it)"
done

if $sudo timeout 60 podman image exists "$image"; then
  exit 0
fi

# The mirror of this machine's bookworm entries, and those entries themselves (deb822
# stanzas or one-line `deb` lines naming bookworm, bookworm-updates or
# bookworm-security), which become the base's own apt sources.
work="$(mktemp -d /var/tmp/attnserve-base.XXXXXX)"
trap '$sudo rm -rf "$work"' EXIT
python3 - "$work/debian.sources" "$work/mirror" <<'EOF'
import glob, re, sys
suites = {"bookworm", "bookworm-updates", "bookworm-security"}
files = glob.glob("/etc/apt/sources.list") + sorted(
    glob.glob("/etc/apt/sources.list.d/*.list") + glob.glob("/etc/apt/sources.list.d/*.sources"))
stanzas, mirror = [], None
for path in files:
    text = open(path).read()
    if path.endswith(".sources"):
        for block in re.split(r"\n\s*\n", text):
            fields = {}
            for line in block.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.split()
            if "deb" in fields.get("types", []) and suites & set(fields.get("suites", [])) \
                    and fields.get("enabled", ["yes"])[0] != "no":
                stanzas.append("\n".join(l for l in block.splitlines()
                                         if not l.startswith("#")).strip())
                if "bookworm" in fields["suites"] and mirror is None:
                    mirror = fields["uris"][0]
    else:
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#")[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] in suites:
                stanzas.append("Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n"
                               "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
                               % (words[1], words[2], " ".join(words[3:]) or "main"))
                if words[2] == "bookworm" and mirror is None:
                    mirror = words[1]
if mirror is None:
    sys.exit("no apt source for bookworm in /etc/apt/sources.list*")
open(sys.argv[1], "w").write("\n\n".join(stanzas) + "\n")
open(sys.argv[2], "w").write(mirror + "\n")
EOF
mirror="$(cat "$work/mirror")"
root="$work/root"

say "debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
started=$SECONDS
if ! $sudo timeout 1200 debootstrap --variant=minbase bookworm "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1; then
  tail -20 "$work/debootstrap.log" >&2
  die "debootstrap failed or took over 20 min (log above)"
fi
say "  done in $((SECONDS - started)) s"

# What debuerreotype does for debian:bookworm-slim: dpkg skips docs, man pages and
# locales from now on (the build stage's packages too), apt keeps no lists or .debs.
$sudo tee "$root/etc/dpkg/dpkg.cfg.d/docker" >/dev/null <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
$sudo tee "$root/etc/apt/apt.conf.d/docker-clean" >/dev/null <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
$sudo find "$root/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete
$sudo find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
$sudo rm -rf "$root"/usr/share/{man,groff,info,lintian,linda,locale}/* \
  "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/cache/apt/*.bin "$root"/var/log/* "$root"/tmp/* \
  "$root/etc/apt/sources.list"
$sudo install -m 644 "$work/debian.sources" "$root/etc/apt/sources.list.d/debian.sources"

say "podman import as $image"
if ! $sudo tar -C "$root" --numeric-owner -c . |
    $sudo timeout 600 podman import --quiet \
      --change 'CMD ["bash"]' \
      --message "debootstrap --variant=minbase bookworm $mirror, slimmed" \
      - "$image" >/dev/null; then
  die "podman import failed"
fi
say "$image: $($sudo podman image inspect --format '{{.Size}}' "$image" |
  awk '{printf "%.0f MB", $1 / 1e6}')"
