// Command standin is the image tests' collector: small, linked against libc through
// cgo as the real one is (so the image must carry the loader and libc), and depending
// on one module the SBOM must list.
package main

// #include <stdlib.h>
import "C"

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	h, _ := v1.NewHash("sha256:0000000000000000000000000000000000000000000000000000000000000000")
	fmt.Println("standin", h.Algorithm, C.abs(-1))
}
