package bmc

import (
	"context"
	"testing"
	"time"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/bmc/redfishtest"
)

// BenchmarkPowerResetToAgent measures bench_power reset on the Redfish
// fake until the guest agent answers again: the BMC part (a session, the
// Reset, the logout) and the guest's boot, reported apart.
//
//	go test -run '^$' -bench PowerResetToAgent -benchtime 3x ./backends/bmc/
func BenchmarkPowerResetToAgent(b *testing.B) {
	for _, tc := range []struct {
		dialect string
		fake    redfishtest.Dialect
	}{{DialectDell, redfishtest.Dell}, {DialectMegaRAC, redfishtest.MegaRAC}} {
		b.Run(tc.dialect, func(b *testing.B) {
			vm := ensureAgent(b)
			fake := startFake(b, redfishtest.Options{Dialect: tc.fake})
			bench := benchFor(b, fake, tc.dialect)
			var bmcTime, total time.Duration
			b.ResetTimer()
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				start := time.Now()
				if err := bench.Power(ctx, backends.PowerReset); err != nil {
					b.Fatal(err)
				}
				bmcTime += time.Since(start)
				if err := vm.WaitAgent(ctx); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				cancel()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/reset-to-agent")
			b.ReportMetric(bmcTime.Seconds()/float64(b.N)*1000, "ms/reset-call")
		})
	}
}

// BenchmarkBmclibResetMegaRAC is the same on bmclib v2.3.5's own "reset",
// for comparison (trap 3): without PowerCycle it sends GracefulShutdown,
// then polls for "off" against the BMC's "Off" for 9 s, then On.
func BenchmarkBmclibResetMegaRAC(b *testing.B) {
	vm := ensureAgent(b)
	fake := startFake(b, redfishtest.Options{Dialect: redfishtest.MegaRAC})
	bench := benchFor(b, fake, DialectMegaRAC)
	var total time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		start := time.Now()
		err := bench.run(ctx, "bmclib reset", func(o *op) error {
			_, err := o.client.SetPowerState(o.ctx, "reset")
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		if err := vm.WaitAgent(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		cancel()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/reset-to-agent")
}
