package cli

import "testing"

func TestParseVolume(t *testing.T) {
	v, err := parseVolume(0, "data:/data")
	if err != nil || v.Name != "data" || v.PVC == nil || v.PVC.ClaimName != "data" || v.Host != nil || v.MountPath != "/data" || v.ReadOnly {
		t.Fatalf("claim = %+v, %v", v, err)
	}
	v, err = parseVolume(2, "/srv/shared:/mnt/s:ro")
	if err != nil || v.Name != "host-2" || v.Host == nil || v.Host.Path != "/srv/shared" || v.PVC != nil || !v.ReadOnly {
		t.Fatalf("host = %+v, %v", v, err)
	}
	if v, err = parseVolume(0, "data:/data:rw"); err != nil || v.ReadOnly {
		t.Fatalf("rw = %+v, %v", v, err)
	}
	for _, bad := range []string{"data", ":/data", "data:relative", "data:/d:rx", "a:/b:ro:x"} {
		if _, err := parseVolume(0, bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
