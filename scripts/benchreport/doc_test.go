package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/test/testenv"
)

func TestRewriteFigures(t *testing.T) {
	table := "| figure |\n|---|\n| `a` |\n"
	tests := []struct {
		name    string
		doc     string
		want    string
		wantErr bool
	}{
		{
			name: "replaces what is between the markers, keeps the rest",
			doc:  "# Performance\n\nprose before\n\n" + beginFigures + "\nold table\nold machine\n" + endFigures + "\n\nprose after\n",
			want: "# Performance\n\nprose before\n\n" + beginFigures + "\n" + table + endFigures + "\n\nprose after\n",
		},
		{
			name: "fills empty markers",
			doc:  beginFigures + "\n" + endFigures + "\n",
			want: beginFigures + "\n" + table + endFigures + "\n",
		},
		{
			name:    "no begin marker",
			doc:     "prose\n" + endFigures + "\n",
			wantErr: true,
		},
		{
			name:    "no end marker",
			doc:     beginFigures + "\nold\n",
			wantErr: true,
		},
		{
			name:    "end marker before the begin marker",
			doc:     endFigures + "\n" + beginFigures + "\n",
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rewriteFigures([]byte(tt.doc), table)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("no error; got\n%s", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			// Rewriting again with the same table changes nothing.
			again, err := rewriteFigures(got, table)
			if err != nil || string(again) != string(got) {
				t.Errorf("a second rewrite changed the doc (err %v):\n%s", err, again)
			}
		})
	}
}

func TestFiguresTable(t *testing.T) {
	figs := []testenv.Figure{
		{Name: "cold_create", Unit: "ms", P50: 500, P99: 900, BaselineP50: 1000, Target: "<= 1.3x"},
		{Name: "claim", Unit: "ms", P50: 12.5, P99: 30, Target: "p99 <= 20"},
		{Name: "no_target", Unit: "ms", P50: 1},
	}
	m := Machine{Cores: 2, Kernel: "6.1.0", Docker: "20.10.24"}
	got := figuresTable(figs, m, time.Date(2026, 12, 6, 7, 30, 0, 0, time.UTC))
	for _, want := range []string{
		"| `cold_create` | ms | 500.0 | 900.0 | 1000 | 0.50× | <= 1.3x | yes |\n",
		"| `claim` | ms | 12.5 | 30.0 | - | - | p99 <= 20 | NO |\n",
		"| `no_target` | ms | 1.000 | 0 | - | - | - | ? |\n",
		"Measured on 2026-12-06 07:30 UTC: 2 cores, kernel 6.1.0, Docker 20.10.24.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	empty := figuresTable(nil, Machine{Cores: 4}, time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC))
	if !strings.Contains(empty, "no figures recorded yet") || !strings.Contains(empty, "kernel unknown, Docker none answered") {
		t.Errorf("the table of no figures on an unknown machine:\n%s", empty)
	}
}
