package js

import "testing"

func TestMaxSleep(t *testing.T) {
	for body, want := range map[string]float64{
		``:              0,
		`vm.sleep(10);`: 10,
		`vm.sleep(2.5); vm.sleep(601); vm.sleep(3);`:            601,
		`const s = 900; vm.sleep(s);`:                           0, // not a literal: unknown, not counted
		`helper(vm).sleep(0x10);`:                               16,
		`if (params.user) { [1].forEach(() => vm.sleep(45)); }`: 45,
		`vm.exec("sleep 999");`:                                 0,
		`vm.sleep(-5);`:                                         0, // a unary minus is not a literal number
	} {
		if got := mustLoad(t, script(body)).Manifest().MaxSleep; got != want {
			t.Errorf("%s: MaxSleep = %v, want %v", body, got, want)
		}
	}
}

// The second parse Load makes to find literal sleeps (compare BenchmarkLoad).
func BenchmarkMaxSleep(b *testing.B) {
	src := []byte(script(`vm.exec("true"); vm.sleep(5); return vm.recipe("login", {user: params.user});`))
	for b.Loop() {
		if literalMaxSleep("t.js", src) != 5 {
			b.Fatal("wrong")
		}
	}
}
