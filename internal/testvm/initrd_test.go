package testvm

import (
	"bytes"
	"testing"
)

// The initrd layer is a newc archive the reader reads back, files last
// written winning as the kernel unpacks them.
func TestCpioRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := &cpioWriter{w: &buf}
	w.file("lib/modules/load-order", []byte("a\n"))
	w.file("lib/modules/x.ko", []byte("\x00vermagic=6.1.0-57-amd64 SMP\x00depends=a,b-c\x00"))
	w.file("lib/modules/load-order", []byte("a\nx\n"))
	w.trailer()
	files, err := readCpio(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if string(files["lib/modules/load-order"]) != "a\nx\n" {
		t.Errorf("load-order %q", files["lib/modules/load-order"])
	}
	ko := files["lib/modules/x.ko"]
	if modinfo(ko, "vermagic") != "6.1.0-57-amd64 SMP" || modinfo(ko, "depends") != "a,b-c" || modinfo(ko, "license") != "" {
		t.Errorf("modinfo of %q", ko)
	}
}
