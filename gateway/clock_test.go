package gateway

import (
	"testing"
	"time"
)

// TestAdvanceClock: the core moves its clock only with Config.TestClock, only for the
// platform admin (a tenant admin whom an operator's policy let through is still
// refused) and only forward by a bounded step.
func TestAdvanceClock(t *testing.T) {
	off := newTestCore(t, Config{}).svc
	_, err := off.AdvanceClock(admin, time.Hour)
	wantCode(t, err, KindNotFound, CodeRouteNotFound)
	if ahead := time.Until(off.now()); ahead > time.Minute {
		t.Fatalf("without TestClock the clock is %s ahead", ahead)
	}

	on := newTestCore(t, Config{TestClock: true}).svc
	_, err = on.AdvanceClock(Caller{Tenant: "t1", KeyRole: "tenant-admin", KeyID: "k1"}, time.Hour)
	wantCode(t, err, KindForbidden, CodeForbidden)
	for _, d := range []time.Duration{0, -time.Second, 25 * time.Hour} {
		_, err = on.AdvanceClock(admin, d)
		wantCode(t, err, KindInvalid, CodeInvalidParameter)
	}
	if ahead := time.Until(on.now()); ahead > time.Minute {
		t.Fatalf("after refused steps the clock is %s ahead", ahead)
	}
	before := time.Now()
	now, err := on.AdvanceClock(admin, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ahead := now.Sub(before); ahead < 2*time.Hour || ahead > 2*time.Hour+time.Minute {
		t.Fatalf("after 2h the clock is %s ahead", ahead)
	}
}
