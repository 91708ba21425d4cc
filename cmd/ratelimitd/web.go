package main

import (
	"cmp"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/web"
)

func newWebCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "web",
		Short: "Manage the browser console's users",
		Long:  helpText("web"),
	}
	user := &cobra.Command{Use: "user", Short: "Add, change or remove a console user"}
	var role string
	var domains []string
	var fromStdin bool
	add := &cobra.Command{
		Use:   "add NAME --role viewer|operator [--domain DOMAIN]...",
		Short: "Add a user, or set an existing user's role, domains and password",
		Long:  helpText("web user add"),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := web.ParseRole(role)
			if err != nil {
				return usageError{err}
			}
			if _, err := web.ParseDomains(domains); err != nil {
				return usageError{err}
			}
			f, users, err := loadUsersFile(opts)
			if err != nil {
				return err
			}
			pw, err := web.ReadPassword(cmd.InOrStdin(), cmd.ErrOrStderr(), fromStdin)
			if err != nil {
				return err
			}
			_, existed := users.Lookup(args[0])
			if err := users.Set(args[0], r, pw, domains...); err != nil {
				return err
			}
			if err := saveUsersFile(f, users); err != nil {
				return err
			}
			verb := "added"
			if existed {
				verb = "updated"
			}
			u, _ := users.Lookup(args[0])
			fmt.Fprintf(cmd.OutOrStdout(), "%s console user %s in %s\n", verb, u, f.Web.UsersFile)
			return nil
		},
	}
	add.Flags().StringVar(&role, "role", "", "viewer (reads) or operator (also acts)")
	add.Flags().StringArrayVar(&domains, "domain", nil, "a sender domain whose mail alone the user sees and acts on (repeatable; none: every domain)")
	add.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of standard input")
	add.MarkFlagRequired("role")
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a user (their sessions end)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, users, err := loadUsersFile(opts)
			if err != nil {
				return err
			}
			if !users.Remove(args[0]) {
				return fmt.Errorf("no console user %s in %s", args[0], f.Web.UsersFile)
			}
			if err := saveUsersFile(f, users); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed console user %s from %s\n", args[0], f.Web.UsersFile)
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the users, their roles and domains",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, users, err := loadUsersFile(opts)
			if err != nil {
				return err
			}
			for _, n := range users.Names() {
				u, _ := users.Lookup(n)
				ds := strings.Join(u.Domains, ",")
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", u.Name, u.Role, cmp.Or(ds, "(all domains)"))
			}
			return nil
		},
	}
	user.AddCommand(add, remove, list)
	cmd.AddCommand(user)
	return cmd
}

// saveUsersFile saves users to f's [web] users_file. Run as root with
// [server] user set, it gives the file to root and the daemon's group,
// mode 0640: the daemon may read it, not change it.
func saveUsersFile(f *config.File, users *web.Users) error {
	path := f.Web.UsersFile
	if err := users.Save(path); err != nil || os.Geteuid() != 0 || f.Server.User == "" {
		return err
	}
	var g *user.Group
	var err error
	if f.Server.Group != "" {
		g, err = user.LookupGroup(f.Server.Group)
	} else if u, uerr := user.Lookup(f.Server.User); uerr != nil {
		err = uerr
	} else {
		g, err = user.LookupGroupId(u.Gid)
	}
	if err != nil {
		return fmt.Errorf("%s saved, but not readable by the daemon's user %s: %w", path, f.Server.User, err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	if err := os.Chown(path, 0, gid); err != nil {
		return err
	}
	return os.Chmod(path, 0o640)
}

// loadUsersFile reads [web] users_file of the configuration.
func loadUsersFile(opts *rootOptions) (*config.File, *web.Users, error) {
	f, err := config.Load(opts.configPath)
	if err != nil {
		return nil, nil, err
	}
	users, err := web.LoadUsers(f.Web.UsersFile)
	return f, users, err
}
