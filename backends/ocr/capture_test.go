package ocr

import (
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/backends/ocr/internal/glyphs"
)

// The corpus (testdata/corpus) and the glyph sheets the atlas is seeded
// from (internal/glyphs/sheets) are screens of real guests showing text
// this test put there: it writes the text (so the ground truth is what was
// written, never what OCR read), takes the frame and saves both. It runs
// only when asked, and takes a few minutes (the Debian desktop's boot and
// login most of them):
//
//	POLIGON_CAPTURE_CORPUS=1 go test -run TestCaptureCorpus ./backends/ocr
//	POLIGON_CAPTURE_CORPUS=1 go test -run 'TestCaptureCorpus/tiny$' ./backends/ocr
//
// then `go generate ./backends/ocr` to rebuild the seed atlas.

const (
	corpusDir = "testdata/corpus"
	sheetsDir = "internal/glyphs/sheets"
)

func TestCaptureCorpus(t *testing.T) {
	if os.Getenv("POLIGON_CAPTURE_CORPUS") == "" {
		t.Skip("set POLIGON_CAPTURE_CORPUS=1 to capture the corpus and the glyph sheets from real guests")
	}
	t.Run("tiny", captureTiny)
	t.Run("tiny-x", captureTinyX)
	t.Run("debian", captureDebian)
	t.Run("debian-desktop", captureDebianDesktop)
}

// A sheet shows a font's repertoire on its character grid: first a row of
// full blocks (█, a whole cell each: where they stand gives the grid), then
// the characters, each followed by a space so that no glyph touches
// another.
func sheetText(chars string, perRow int) string {
	var b strings.Builder
	b.WriteString(strings.Repeat("█", 10) + "\n")
	n := 0
	for _, r := range chars {
		if r == ' ' || r == '\n' {
			continue
		}
		b.WriteRune(r)
		n++
		if n%perRow == 0 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n"
}

// Repertoires.
const (
	asciiChars = "!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~"
	// CP437's letters and signs beyond ASCII (the VGA BIOS font, and the
	// Linux console's 8x16, map Unicode to these glyphs); its Greek is left
	// out: Greek is not read here, and α, ß or µ beside Latin would only
	// add look-alikes.
	cp437Chars = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥áíóúñÑªº¿¬½¼¡«»±÷°·²"
	// Box drawing and blocks: frame, not text (the reader leaves them out).
	cp437Frame    = "░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀■"
	latin1Chars   = "¡¢£¤¥¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖ×ØÙÚÛÜÝÞßàáâãäåæçèéêëìíîïðñòóôõö÷øùúûüýþÿ"
	cyrillicChars = "АБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯабвгдеёжзийклмнопрстуфхцчшщъыьэюя№"
	// Punctuation terminals and installers print.
	extraChars   = "–—‘’“”„…•←↑→↓"
	unicodeFrame = "─│┌┐└┘├┤┬┴┼═║╔╗╚╝╠╣╦╩╬░▒▓█▀▄▌▐■"
)

// captureTiny: the VGA text console (720x400, QEMU's VGA BIOS font in 9x16
// cells), written through /dev/tty1.
func captureTiny(t *testing.T) {
	g := bootGuest(t, "tiny", tinyVMID)
	// The shell's screen, as make demo shows it: the banner, a command
	// typed, its output and the prompt.
	version := strings.TrimSpace(g.sh("busybox 2>&1 | head -n 1"))
	banner, ok := strings.CutSuffix(version, " multi-call binary.")
	if !ok {
		t.Fatalf("busybox says %q", version)
	}
	g.typeText("echo hello from poligon\n")
	time.Sleep(time.Second)
	shell := []string{banner + " built-in shell (ash)", "Enter 'help' for a list of built-in commands.", "",
		"tiny:~# echo hello from poligon", "hello from poligon", "tiny:~#"}
	on, _ := g.blinking()
	saveCorpus(t, "tiny-shell", on, "the tiny template's VGA console after boot: busybox's banner, a command typed and its output",
		region{kind: "mono", box: image.Rect(0, 0, 720, 400), lines: shell})

	tty := func(text string) {
		g.write("/tmp/screen.txt", text)
		g.sh(`printf '\033[?25l\033[H\033[J' >/dev/tty1; cat /tmp/screen.txt >/dev/tty1`)
	}
	// The VGA font's sheet.
	tty(sheetText(asciiChars+cp437Chars+cp437Frame, 39))
	saveSheet(t, "vga-9x16", g.still(), asciiChars+cp437Chars+cp437Frame, 39, cp437Frame, "narrow vga-8x16")

	// The kernel's log, as dmesg shows it: its first screen (the boot) and
	// its last, cut to the screen's 80 columns.
	for _, c := range []struct{ name, cmd, what string }{
		{"tiny-bootlog", "dmesg | head -n 24", "the kernel's boot log (dmesg's first 24 lines) on the VGA console"},
		{"tiny-dmesg", "dmesg | tail -n 24", "dmesg's last 24 lines on the VGA console"},
	} {
		text := g.sh(c.cmd + " | cut -c1-80 | expand")
		tty(strings.TrimRight(text, "\n"))
		saveCorpus(t, c.name, g.still(), c.what, region{kind: "mono", box: image.Rect(0, 0, 720, 400), lines: strings.Split(strings.TrimRight(text, "\n"), "\n")})
	}

	// A dialog as ncurses' dialog draws one on the Linux console: a blue
	// screen, a grey box with a title, a message, two buttons (the
	// focused one highlighted) and a shadow.
	dialog, lines := dialogScreen()
	tty(dialog)
	saveCorpus(t, "tiny-dialog", g.still(), "a dialog(1)-style box drawn with escape sequences and box-drawing characters on the VGA console",
		region{kind: "mono", box: image.Rect(0, 0, 720, 400), lines: lines})
}

// dialogScreen answers the escape sequences of a dialog box and the text
// lines it shows (box drawing included: the scoring leaves it out).
func dialogScreen() (string, []string) {
	const (
		blue  = "\033[0;37;44m"
		box   = "\033[0;30;47m"
		title = "\033[0;34;47m"
		sel   = "\033[0;37;41m"
		shade = "\033[0;40m"
	)
	at := func(row, col int) string { return fmt.Sprintf("\033[%d;%dH", row+1, col+1) }
	var b strings.Builder
	b.WriteString(blue + "\033[H\033[J")
	b.WriteString(at(0, 1) + "Package configuration")
	b.WriteString(at(1, 1) + strings.Repeat("─", 78))
	const top, left, width, height = 6, 14, 52, 11
	body := []string{
		"",
		"Choose the character set that the console",
		"font should support. Latin and Cyrillic",
		"are both offered: pick Combined for both.",
		"",
		"",
		"",
		"",
		"",
	}
	for r := 0; r < height; r++ {
		b.WriteString(at(top+r, left) + box)
		switch r {
		case 0:
			b.WriteString("┌" + strings.Repeat("─", 14) + title + " Configuring kbd " + box + strings.Repeat("─", width-2-14-17) + "┐")
		case height - 1:
			b.WriteString("└" + strings.Repeat("─", width-2) + "┘")
		default:
			line := body[r-1]
			b.WriteString("│ " + line + strings.Repeat(" ", width-4-len([]rune(line))) + " │")
		}
		if r > 0 {
			b.WriteString(shade + "  ")
		}
	}
	b.WriteString(at(top+height, left+2) + shade + strings.Repeat(" ", width))
	// The buttons, on the box's next-to-last line.
	b.WriteString(at(top+height-2, left+10) + sel + "<  Ok  >" + box + strings.Repeat(" ", 14) + "<Cancel>")
	b.WriteString(at(23, 0) + blue + "\033[0m")
	lines := []string{
		"Package configuration",
		strings.Repeat("─", 78),
		"┌" + strings.Repeat("─", 14) + " Configuring kbd " + strings.Repeat("─", width-2-14-17) + "┐",
	}
	for _, l := range body {
		lines = append(lines, "│ "+l+strings.Repeat(" ", width-4-len([]rune(l)))+" │")
	}
	buttons := []rune(lines[len(lines)-1])
	copy(buttons[10:], []rune("<  Ok  >"))
	copy(buttons[32:], []rune("<Cancel>"))
	lines[len(lines)-1] = string(buttons)
	lines = append(lines, "└"+strings.Repeat("─", width-2)+"┘")
	return b.String(), lines
}

// captureTinyX: xterms in misc-fixed (xfonts-base) under twm, whose
// titles and menus use misc-fixed too.
func captureTinyX(t *testing.T) {
	g := bootGuest(t, "tiny-x", tinyXVMID)
	x := &desktop{g: g, run: g.sh}
	x.waitX()
	// Only the windows this test opens: the session's own xterm goes.
	x.closeAll()

	// The glyph sheets: each xterm font tiny-x has, plain and bold (\033[1m:
	// xterm draws bold with the font's bold sibling, 6x13bold and 9x15bold,
	// or by overstriking, 10x20).
	chars := asciiChars + latin1Chars + cyrillicChars + extraChars + unicodeFrame
	for _, f := range []struct{ font, face string }{{"6x13", "6x13"}, {"9x15", "9x15"}, {"10x20", "10x20"}} {
		for _, bold := range []bool{false, true} {
			face, attr := f.face, ""
			if bold {
				face, attr = f.face+"bold", `\033[1m`
			}
			x.write("/tmp/sheet.txt", sheetText(chars, 50))
			box := x.xterm("sheet", "-fn "+f.font+" -geometry 102x9+0+0", `printf '\033[?25l`+attr+`'; cat /tmp/sheet.txt`)
			saveSheet(t, face, crop(x.still(), box), chars, 50, unicodeFrame)
			x.closeAll()
		}
	}

	// Latin, Cyrillic and mixed lines in three fonts, titles in both
	// scripts, a reverse-video row and a white-on-blue one.
	en := []string{
		"Press Next to continue or Cancel to quit the installer now.",
		"Network settings: address 10.0.2.15, gateway 10.0.2.2, mask 255.255.255.0",
		"Username: test   Password: ********   Domain: example.org",
		"Copy the file to ~/backup and run ./configure --prefix=/usr",
		"tiny-x:~# ls -la /etc > /tmp/list.txt && echo done $HOME",
		"OK   Apply   Cancel   Help",
	}
	ru := []string{
		"Нажмите Далее, чтобы продолжить установку системы.",
		"Настройки сети: адрес 10.0.2.15, шлюз 10.0.2.2, маска сети",
		"Пользователь: тест   Пароль: ********   Домен: пример.рф",
		"Съешь же ещё этих мягких французских булок да выпей чаю.",
		"Было сухо и тепло, на берегу стоял старый дом.",
		"ОК   Применить   Отмена   Справка",
	}
	mixed := []string{
		"Нажмите Next для продолжения или Cancel для выхода.",
		"Файл config.toml не найден в каталоге /etc/poligon",
		"Сервер nginx 1.22 (Debian) запущен на порту 8080",
		"Press Далее to continue, Отмена to quit.",
		"Версия Linux 6.1.0 загружена: модули virtio и bochs",
		"Москва Moscow Париж Paris Берлин Berlin",
	}
	x.write("/tmp/a.txt", strings.Join(append(append(append([]string{}, en...), ru...), mixed...), "\n")+"\n")
	a := x.xterm("Latin and Cyrillic", "-fn 6x13 -geometry 80x19+8+24", `printf '\033[?25l'; cat /tmp/a.txt`)
	x.write("/tmp/b.txt", strings.Join(append(append([]string{}, ru[:4]...), en[:4]...), "\n")+"\n")
	b := x.xterm("Терминал", "-fn 9x15 -bg black -fg white -geometry 74x9+596+24", `printf '\033[?25l'; cat /tmp/b.txt`)
	x.write("/tmp/c.txt", strings.Join(mixed[:3], "\n")+"\n")
	c := x.xterm("mixed Смешанный title", "-fn 10x20 -geometry 56x6+8+330", `printf '\033[?25l'; cat /tmp/c.txt; printf '\033[7m  Selected row in reverse video  \033[0m\n\033[44;37m  Выбранная строка меню  \033[0m'`)
	frame := x.still()
	titleBox := func(win image.Rectangle) image.Rectangle {
		return image.Rect(win.Min.X, win.Min.Y-24, win.Max.X, win.Min.Y)
	}
	saveCorpus(t, "tinyx-scripts", frame, "tiny-x: xterms in misc-fixed 6x13, 9x15 (white on black) and 10x20 with Latin, Cyrillic and mixed lines, titles in both scripts, a reverse-video and a white-on-blue row",
		region{kind: "mono", box: a, lines: append(append(append([]string{}, en...), ru...), mixed...)},
		region{kind: "mono", box: titleBox(a), lines: []string{"Latin and Cyrillic"}},
		region{kind: "mono", box: b, lines: append(append([]string{}, ru[:4]...), en[:4]...)},
		region{kind: "mono", box: titleBox(b), lines: []string{"Терминал"}},
		region{kind: "mono", box: c, lines: append(append([]string{}, mixed[:3]...), "  Selected row in reverse video", "  Выбранная строка меню")},
		region{kind: "mono", box: titleBox(c), lines: []string{"mixed Смешанный title"}},
	)

	// twm's menu, held open on the root window (a button held down), the
	// pointer on its second entry, which twm highlights.
	x.closeAll()
	d := x.xterm("Terminal", "-fn 6x13 -geometry 60x5+700+500", `printf '\033[?25l'; printf 'The menu is open on the left.\nЛевое меню открыто.\n'`)
	g.sh("xdotool mousemove 300 200 mousedown 1 && sleep 1 && xdotool mousemove 322 219")
	menu := x.still()
	saveCorpus(t, "tinyx-menu", menu, "tiny-x: twm's root menu held open (title tiny-x, entries xterm and restart; the pointer on xterm, highlighted) beside an xterm",
		region{kind: "mono", box: image.Rect(280, 180, 460, 280), lines: []string{"tiny-x", "xterm", "restart"}},
		region{kind: "mono", box: titleBox(d), lines: []string{"Terminal"}},
		region{kind: "mono", box: d, lines: []string{"The menu is open on the left.", "Левое меню открыто."}},
	)
	g.sh("xdotool mouseup 1")
}

// desktop drives an X session through the guest agent: tiny-x's (its
// commands have DISPLAY=:0 and a UTF-8 locale) or, with run, a user's.
type desktop struct {
	g   *guest
	run func(cmd string) string
}

// window waits for the window titled title and answers its box (xwininfo's
// client window).
func (x *desktop) window(title string) image.Rectangle {
	x.g.t.Helper()
	// Mapped (viewable: where the window manager put it).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		out := x.run(fmt.Sprintf("for i in $(seq 150); do id=$(xdotool search --onlyvisible --name %s 2>/dev/null | head -n 1); [ -n \"$id\" ] && break; sleep 0.2; done; xwininfo -id $id", shellQuote("^"+regexpQuote(title)+"$")))
		var ax, ay, w, h int
		for _, l := range strings.Split(out, "\n") {
			l = strings.TrimSpace(l)
			fmt.Sscanf(l, "Absolute upper-left X: %d", &ax)
			fmt.Sscanf(l, "Absolute upper-left Y: %d", &ay)
			fmt.Sscanf(l, "Width: %d", &w)
			fmt.Sscanf(l, "Height: %d", &h)
		}
		r := image.Rect(ax, ay, ax+w, ay+h)
		if strings.Contains(out, "IsViewable") && !r.Empty() {
			return r
		}
		if time.Now().After(deadline) {
			x.g.t.Fatalf("window %q: xwininfo says %q", title, out)
		}
	}
}

func (x *desktop) waitX() {
	x.g.t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		// The session is up when its own xterm is mapped.
		if strings.TrimSpace(x.g.sh("xdotool search --onlyvisible --class xterm 2>/dev/null; true")) != "" {
			return
		}
		if time.Now().After(deadline) {
			x.g.t.Fatal("no X session in 2 minutes")
		}
	}
}

func (x *desktop) write(path, content string) { x.g.write(path, content) }

// closeAll closes every xterm and moves the pointer out of the way.
func (x *desktop) closeAll() {
	x.g.sh("for w in $(xdotool search --class xterm 2>/dev/null); do xdotool windowkill $w 2>/dev/null; done; xdotool mousemove 1279 799; sleep 0.5")
}

// xterm opens an xterm titled title running sh -c cmd (then sleeping),
// waits for it and answers its text area's box (the client window, less
// xterm's 2-pixel inner border).
func (x *desktop) xterm(title, args, cmd string) image.Rectangle {
	x.g.t.Helper()
	x.g.sh(fmt.Sprintf("setsid xterm -title %s %s -e sh -c %s </dev/null >/dev/null 2>&1 &", shellQuote(title), args, shellQuote(cmd+"; exec sleep 3600")))
	return x.window(title)
}

func (x *desktop) still() *image.RGBA { return x.g.still() }

// crop answers the part r of img, at 0,0.
func crop(img *image.RGBA, r image.Rectangle) *image.RGBA {
	r = r.Intersect(img.Bounds())
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	for y := 0; y < r.Dy(); y++ {
		copy(out.Pix[y*out.Stride:], img.Pix[(r.Min.Y+y)*img.Stride+r.Min.X*4:(r.Min.Y+y)*img.Stride+r.Max.X*4])
	}
	return out
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteRune('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// captureDebian: the debian template's Linux console (the kernel's
// framebuffer console on bochs-drm, its built-in font), the login prompt
// getty draws, then a login and commands typed.
func captureDebian(t *testing.T) {
	g := bootGuest(t, "debian", debianVMID)
	// getty's screen: /etc/issue's line and the login prompt.
	host := strings.TrimSpace(g.sh("hostname"))
	issue := strings.TrimSpace(strings.NewReplacer(`\n`, host, `\l`, "tty1", `\r`, strings.TrimSpace(g.sh("uname -r"))).Replace(g.sh("cat /etc/issue")))
	for deadline := time.Now().Add(3 * time.Minute); !strings.Contains(g.sh("ps -eo args"), "agetty"); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("no getty on tty1 in 3 minutes")
		}
	}
	time.Sleep(2 * time.Second)
	on, _ := g.blinking()
	w, h := on.Bounds().Dx(), on.Bounds().Dy()
	t.Logf("the console is %dx%d", w, h)
	saveCorpus(t, "debian-login", on, "the debian template's Linux console (framebuffer, the kernel's font) as getty leaves it: /etc/issue and the login prompt",
		region{kind: "mono", box: image.Rect(0, 0, w, h), lines: append(strings.Split(issue, "\n"), "", host+" login:")})

	// A login and a command typed, as a person would.
	g.typeText("test\n")
	time.Sleep(2 * time.Second)
	g.typeText("test\n")
	for deadline := time.Now().Add(time.Minute); !strings.Contains(g.sh("who"), "tty1"); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatal("test did not log in on tty1 in a minute")
		}
	}
	g.typeText("clear\n")
	time.Sleep(2 * time.Second)
	g.typeText("uname -srm; id; df -h / | cut -c1-60\n")
	time.Sleep(3 * time.Second)
	out := g.sh("su - test -c 'uname -srm; id; df -h / | cut -c1-60'")
	on, _ = g.blinking()
	prompt := "test@" + host + ":~$"
	lines := append([]string{prompt + " uname -srm; id; df -h / | cut -c1-60"}, strings.Split(strings.TrimRight(out, "\n"), "\n")...)
	saveCorpus(t, "debian-shell", on, "the debian template's Linux console after a login as test and a command typed (its output taken again through the guest agent)",
		region{kind: "mono", box: image.Rect(0, 0, w, h), lines: append(lines, prompt)})
	// No sheet of this console's font: it is the kernel's own 8x16
	// (lib/fonts/font_8x16.c, GPL-2.0), which this project does not ship.
	// The atlas reads it with the VGA BIOS font's glyphs in 8-pixel cells
	// (vga-8x16, public domain: 161 of the 193 characters are drawn the
	// same) and learns the rest from tesseract.
}

// captureDebianDesktop: the debian-desktop template's XFCE session:
// xfce4-terminal in DejaVu Sans Mono (fonts-dejavu-core, drawn
// anti-aliased by the guest's cairo), and poligon-form, a GTK window in
// DejaVu Sans.
func captureDebianDesktop(t *testing.T) {
	g := bootGuest(t, "debian-desktop", debianDesktopVMID)
	// The greeter opens on the test user's password (lightdm's GTK
	// greeter with its user list): type it, as a person would.
	g.waitFor("pgrep -x lightdm-gtk-gre", 3*time.Minute)
	for try := 0; ; try++ {
		time.Sleep(10 * time.Second) // the greeter draws a while after it starts
		g.still()
		g.typeText("test")
		g.key("ret")
		if g.try("for i in $(seq 60); do pgrep -u test -x xfce4-session >/dev/null && exit 0; sleep 1; done; exit 1") {
			break
		}
		if try == 2 {
			shot := filepath.Join(os.TempDir(), "poligon-capture-greeter.png")
			savePNG(t, shot, g.frame())
			t.Fatalf("no XFCE session after typing the password three times (the screen: %s)", shot)
		}
	}
	g.waitFor("pgrep -u test -x xfdesktop", 4*time.Minute)
	time.Sleep(30 * time.Second) // the panel and the desktop draw some 15-30 s after (TCG)
	x := &desktop{g: g, run: func(cmd string) string {
		// As the session: its environment, read from its process.
		return g.sh(`p=$(pgrep -u test -x xfce4-session | head -n 1); ` +
			`env $(tr '\0' '\n' < /proc/$p/environ | grep -E '^(DISPLAY|XAUTHORITY|DBUS_SESSION_BUS_ADDRESS|XDG_RUNTIME_DIR|LANG)=') ` +
			`runuser -u test -- sh -c ` + shellQuote(cmd))
	}}
	x.run("xdotool mousemove 1279 799")
	chars := asciiChars + latin1Chars + cyrillicChars + extraChars + unicodeFrame
	term := func(title, geometry, cmd string) image.Rectangle {
		x.run(fmt.Sprintf("setsid xfce4-terminal --disable-server --hide-menubar --hide-toolbar --hide-scrollbar --title %s --geometry %s -x sh -c %s </dev/null >/dev/null 2>&1 &",
			shellQuote(title), geometry, shellQuote(cmd+"; exec sleep 3600")))
		return x.window(title)
	}
	for _, bold := range []bool{false, true} {
		face, attr := "dejavu-mono", ""
		if bold {
			face, attr = "dejavu-monobold", `\033[1m`
		}
		g.write("/tmp/sheet.txt", sheetText(chars, 50))
		box := term("sheet", "102x9+0+30", `printf '\033[?25l`+attr+`'; cat /tmp/sheet.txt`)
		var sheet *image.RGBA
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			sheet = crop(x.still(), box.Inset(-40)) // the marker row finds the grid
			if _, err := glyphs.SheetGrid(sheet); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the sheet in xfce4-terminal: %v", err)
			}
		}
		saveSheet(t, face, sheet, chars, 50, unicodeFrame)
		x.run("xdotool search --name '^sheet$' windowkill")
	}

	en := []string{
		"Press Next to continue or Cancel to quit the installer now.",
		"Network settings: address 10.0.2.15, gateway 10.0.2.2, mask 255.255.255.0",
		"Username: test   Password: ********   Domain: example.org",
		"test@debian:~$ ls -la /etc > /tmp/list.txt && echo done $HOME",
	}
	ru := []string{
		"Нажмите Далее, чтобы продолжить установку системы.",
		"Настройки сети: адрес 10.0.2.15, шлюз 10.0.2.2, маска сети",
		"Съешь же ещё этих мягких французских булок да выпей чаю.",
		"Было сухо и тепло, на берегу стоял старый дом.",
	}
	mixed := []string{
		"Нажмите Next для продолжения или Cancel для выхода.",
		"Файл config.toml не найден в каталоге /etc/poligon",
		"Сервер nginx 1.22 (Debian) запущен на порту 8080",
		"Москва Moscow Париж Paris Берлин Berlin",
	}
	lines := append(append(append([]string{}, en...), ru...), mixed...)
	g.write("/tmp/term.txt", strings.Join(lines, "\n")+"\n")
	tb := term("Terminal text", "80x13+20+60", `printf '\033[?25l'; cat /tmp/term.txt`)
	form := []string{"Hello from DejaVu Sans", "Привет из DejaVu Sans", "Version 1.22 (Debian) запущен"}
	args := ""
	for _, l := range form {
		args += " " + shellQuote(l)
	}
	x.run("setsid poligon-form --title 'Poligon form'" + args + " </dev/null >/dev/null 2>&1 &")
	x.window("Poligon form")
	x.run("xdotool search --name '^Poligon form$' windowmove 780 330")
	time.Sleep(2 * time.Second)
	fb := x.window("Poligon form")
	x.run("xdotool mousemove 1279 799")
	time.Sleep(3 * time.Second)
	frame := x.still()
	saveCorpus(t, "xfce-terminal", frame, "debian-desktop: xfce4-terminal (DejaVu Sans Mono, anti-aliased) with Latin, Cyrillic and mixed lines",
		region{kind: "mono", box: tb, lines: lines})
	saveCorpus(t, "gtk-form", nil, "debian-desktop: poligon-form, a GTK 3 window in DejaVu Sans: its lines, a label, two buttons and a list",
		region{kind: "prop", box: fb, lines: append(append([]string{}, form...), "Name:", "Apply Clear", "Alpha", "Bravo", "Charlie")})
}

// region is a part of a corpus frame and the text lines it shows, top to
// bottom; kind is "mono" (a character grid) or "prop" (proportional text).
type region struct {
	kind  string
	box   image.Rectangle
	lines []string
}

var lastCorpus string

// saveCorpus writes a corpus frame: frame.png and truth.txt, whose lines
// are the regions, each a header "@ kind x0 y0 x1 y1" and its text (img
// nil: the frame is the one saved last, named by a line "frame PATH").
func saveCorpus(t *testing.T, name string, img *image.RGBA, what string, regions ...region) {
	t.Helper()
	dir := filepath.Join(corpusDir, name)
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n# written by TestCaptureCorpus (capture_test.go): the text below is what it put on the screen\n", what)
	if img != nil {
		savePNG(t, filepath.Join(dir, "frame.png"), img)
	} else {
		// The frame saved last (one screen, two corpus entries).
		fmt.Fprintf(&b, "frame ../%s/frame.png\n", lastCorpus)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lastCorpus = name
	for _, r := range regions {
		fmt.Fprintf(&b, "@ %s %d %d %d %d\n", r.kind, r.box.Min.X, r.box.Min.Y, r.box.Max.X, r.box.Max.Y)
		for _, l := range r.lines {
			b.WriteString(strings.TrimRight(l, " ") + "\n")
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "truth.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s", dir)
}

// saveSheet writes a glyph sheet: the frame cropped to the sheet's text
// and what it shows (the repertoire, how many a row, which are frame).
func saveSheet(t *testing.T, face string, img *image.RGBA, chars string, perRow int, frame string, more ...string) {
	t.Helper()
	savePNG(t, filepath.Join(sheetsDir, face+".png"), img)
	var b strings.Builder
	fmt.Fprintf(&b, "# the %s glyph sheet, written by TestCaptureCorpus (capture_test.go)\nface %s\nperrow %d\nchars %s\nframe %s\n", face, face, perRow, chars, frame)
	for _, m := range more {
		b.WriteString(m + "\n")
	}
	if err := os.WriteFile(filepath.Join(sheetsDir, face+".txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved sheet %s", face)
}
