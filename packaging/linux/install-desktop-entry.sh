#!/bin/sh
# Add Speculens to the desktop's application menu (for the current user), from the unpacked tarball.
#
#   ./install-desktop-entry.sh              install: menu entry, icons, AppStream metadata
#   ./install-desktop-entry.sh --uninstall  remove them again (the unpacked folder is left alone)
#
# It writes under ${XDG_DATA_HOME:-~/.local/share} only, so it needs no root. The menu entry starts the
# program in this folder: move the folder, then run this script again.
set -eu

APP_ID=io.speculens.Speculens
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}

if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$DATA/applications/$APP_ID.desktop" "$DATA/metainfo/$APP_ID.metainfo.xml"
    rm -f "$DATA"/icons/hicolor/*/apps/"$APP_ID".png "$DATA/icons/hicolor/scalable/apps/$APP_ID.svg"
    echo "Speculens removed from the application menu."
else
    [ -x "$HERE/speculens" ] || { echo "speculens not found next to this script ($HERE)" >&2; exit 1; }
    mkdir -p "$DATA/applications" "$DATA/metainfo"
    # Exec and TryExec name the program by its absolute path: the folder is not on PATH.
    sed -e "s|^Exec=speculens|Exec=\"$HERE/speculens\"|" -e "s|^TryExec=speculens|TryExec=$HERE/speculens|" \
        "$HERE/share/applications/$APP_ID.desktop" > "$DATA/applications/$APP_ID.desktop"
    cp "$HERE/share/metainfo/$APP_ID.metainfo.xml" "$DATA/metainfo/"
    for dir in "$HERE"/share/icons/hicolor/*/apps; do
        size=$(basename "$(dirname "$dir")")
        mkdir -p "$DATA/icons/hicolor/$size/apps"
        cp "$dir"/* "$DATA/icons/hicolor/$size/apps/"
    done
    echo "Speculens added to the application menu (entry: $DATA/applications/$APP_ID.desktop)."
fi
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database -q "$DATA/applications" || true
command -v gtk-update-icon-cache >/dev/null 2>&1 && gtk-update-icon-cache -q -t "$DATA/icons/hicolor" || true
