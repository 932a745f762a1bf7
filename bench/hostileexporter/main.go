// Command hostileexporter serves one of harness/hostile's exporters (answers
// meant to harm a scraper) for bench/scrape-memory.sh: it prints its address
// on stdout and serves until killed.
//
//	hostileexporter -mode series
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/bridge-dev/bridge/harness/hostile"
)

func main() {
	modes := make([]string, 0, len(hostile.Modes))
	for m, what := range hostile.Modes {
		modes = append(modes, m+": "+what)
	}
	sort.Strings(modes)
	mode := flag.String("mode", "series", "one of:\n"+strings.Join(modes, "\n"))
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	h, err := hostile.Handler(*mode)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr().String())
	os.Stdout.Sync()
	log.Fatal(http.Serve(ln, h))
}
