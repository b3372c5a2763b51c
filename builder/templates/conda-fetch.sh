#!/bin/sh
# Fetch every package of a conda explicit list (conda.explicit.txt, the lock's conda part), check
# each file against the list's sha256, and write FOLDER/explicit.txt naming the checked local
# files: `conda create --offline --file FOLDER/explicit.txt` then installs exactly those bytes
# (and checks each sha256 again).
#
# Why a script and not `conda create --file conda.explicit.txt`: the channel may be a mirror whose
# URL holds a credential (mirrors.conda_channel, a BuildKit secret: CONDA_CHANNEL). Only curl sees
# it here; conda sees file:// URLs, so its history and records never hold it.
#
# Usage: conda-fetch.sh LIST FOLDER   (CONDA_CHANNEL, when set, replaces the list's channel)
set -eu
list=$1
folder=$2
channel=$(sed -n 's/^# channel: //p' "$list")
source=${CONDA_CHANNEL:-$channel}
source=${source%/}
mkdir -p "$folder"
echo "@EXPLICIT" > "$folder/explicit.txt"
grep -v '^[#@]' "$list" | while IFS= read -r line; do
    [ -n "$line" ] || continue
    url=${line%%#*}
    sha=${line##*#sha256:}
    path=${url#"$channel"/}
    file=${path##*/}
    if ! curl -fsS --retry 3 -o "$folder/$file" "$source/$path"; then
        echo "conda-fetch: could not download $path from the conda channel (mirrors.conda_channel, else $channel)" >&2
        exit 1
    fi
    if ! echo "$sha  $folder/$file" | sha256sum -c --status -; then
        echo "conda-fetch: $path has other bytes than the lock's sha256 $sha: refusing it" >&2
        exit 1
    fi
    echo "file://$folder/$file#sha256:$sha" >> "$folder/explicit.txt"
done
echo "conda-fetch: $(grep -c '^file://' "$folder/explicit.txt") conda packages fetched, each sha256 as locked"
