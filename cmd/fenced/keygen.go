package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/spf13/cobra"
)

func init() {
	extraCommands = append(extraCommands, newKeygenCmd)
}

const defaultKeyFile = "/etc/fenced/gossip.key"

func newKeygenCmd(_ context.Context, s *stdio) *cobra.Command {
	var out string
	var size int
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create the cluster key (gossip.key_file)",
		Long: `Create the cluster's key: random bytes from the kernel, base64, in a file
readable only by its owner (mode 0400). The key encrypts and authenticates
gossip and roots the mutual TLS that protects raft: only its holders vote and
replicate. Create it once, on one node, and copy the file to the same path on
every node (as gossip.key_file names it), keeping its mode:

  fenced keygen --out /etc/fenced/gossip.key
  scp -p /etc/fenced/gossip.key node2:/etc/fenced/gossip.key

An existing file is never overwritten unless --force is given: a node with a
new key cannot talk to the others until every node has it. To rotate a
running cluster's key, write the new one to another file and add it to
gossip.key_file (which holds up to 8 keys, one a line, the first encrypting)
in three rolling reloads: add it as the second line everywhere, move it first
everywhere, remove the old line everywhere (README, "Rotating the cluster key").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch size {
			case 16, 24, 32:
			default:
				return &exitError{exitUsage, fmt.Errorf("--bytes %d: want 16, 24 or 32 (AES-128, -192 or -256)", size)}
			}
			key := make([]byte, size)
			if _, err := rand.Read(key); err != nil {
				return &exitError{exitFailure, fmt.Errorf("random bytes: %w", err)}
			}
			text := base64.StdEncoding.EncodeToString(key) + "\n"
			if err := writeKey(out, text, force); err != nil {
				return &exitError{exitFailure, err}
			}
			fmt.Fprintf(s.out, "wrote a %d-byte cluster key to %s (mode 0400); copy it to the same path on every node\n", size, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", defaultKeyFile, "file to create (gossip.key_file)")
	cmd.Flags().IntVar(&size, "bytes", 32, "key length: 16, 24 or 32")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing file")
	return cmd
}

// writeKey creates path with mode 0400 holding text. The file is created
// with that mode (never readable by others, not even for a moment) and
// written in full before it takes the final name, so a failure leaves no
// partial key behind.
func writeKey(path, text string, force bool) error {
	if _, err := os.Lstat(path); err == nil && !force {
		return fmt.Errorf("%s exists: not replaced (a node with a new key cannot talk to the others; --force replaces it)", path)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := path + ".new"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o400)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(text)
	if werr == nil {
		werr = f.Sync()
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		// The umask can only take permissions away; set exactly 0400.
		werr = os.Chmod(tmp, 0o400)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, werr)
	}
	return nil
}
