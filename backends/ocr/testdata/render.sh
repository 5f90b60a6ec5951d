#!/bin/sh
# Renders screens.png: what tiny-x shows (xterms in X's misc-fixed 6x13
# font, UTF-8), drawn by Xvfb on the host so the test needs no VM.
# Needs: xvfb xterm xfonts-base x11-apps netpbm. Run from this directory.
#   xterm A (+10+10, black on white): en.txt, then a reverse-video row
#   xterm B (+640+10, white on black, a dark panel): ru.txt, then a white-on-blue row
#   xterm C (+10+300, black on white): ru.txt then en.txt, interleaved
set -eu
D=:57
Xvfb $D -screen 0 1280x800x24 -nolisten tcp >/dev/null 2>&1 &
X=$!
trap 'kill $X' EXIT
sleep 1
export DISPLAY=$D LANG=C.UTF-8
here=$(pwd)
xterm -u8 -geometry 80x12+10+10 -e sh -c "cat $here/en.txt; printf '\033[7m  Selected row in reverse video  \033[0m'; sleep 60" &
xterm -u8 -bg black -fg white -geometry 80x12+640+10 -e sh -c "cat $here/ru.txt; printf '\033[44;37m  Выбранная строка меню  \033[0m'; sleep 60" &
xterm -u8 -geometry 100x21+10+300 -e sh -c "paste -d '\n' $here/ru.txt $here/en.txt; printf '\033[?25l'; sleep 60" &
sleep 2
xwd -root -silent | xwdtopnm 2>/dev/null | pnmtopng >screens.png
