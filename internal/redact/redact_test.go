package redact

import "testing"

// Command hides the secrets a shell command visibly carries and leaves
// every other word as written.
func TestCommand(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Left alone: nothing secret.
		{"wget -qO- http://{{ip.server}}/", "wget -qO- http://{{ip.server}}/"},
		{"mkdir -p /www && echo hello > /www/index.html", "mkdir -p /www && echo hello > /www/index.html"},
		{"busybox httpd -p 80 -h /www", "busybox httpd -p 80 -h /www"},
		{"apt-get install -y openssh-server && ssh-keygen -t rsa -f /root/k", "apt-get install -y openssh-server && ssh-keygen -t rsa -f /root/k"},
		{"curl -s 'http://{{ip.server}}/?q=${1}' # \\`", "curl -s 'http://{{ip.server}}/?q=${1}' # \\`"},
		{"passwd -d test; echo key-file=/etc/k", "passwd -d test; echo key-file=/etc/k"},
		{"echo a:b | tee /tmp/x", "echo a:b | tee /tmp/x"},
		// Secret-named variables and options.
		{"PGPASSWORD=hunter2 psql -h db", "PGPASSWORD=<redacted 7 bytes> psql -h db"},
		{"export API_TOKEN=abc123; run", "export API_TOKEN=<redacted 6 bytes>; run"},
		{"mysql -u root --password=hunter2 -e 'select 1'", "mysql -u root --password=<redacted 7 bytes> -e 'select 1'"},
		{"mysql --password 'two words' -e x", "mysql --password <redacted 11 bytes> -e x"},
		{`app --client-secret="a \"b\"" --verbose`, `app --client-secret=<redacted 9 bytes> --verbose`},
		{"tool --api-key k1 --no-password-prompt -v", "tool --api-key <redacted 2 bytes> --no-password-prompt -v"},
		{`curl -H "X-Api-Key: k-123" http://h/`, `curl -H "X-Api-Key: <redacted 5 bytes>" http://h/`},
		// Credentials in URLs, headers, curl -u, sshpass, chpasswd.
		{"git clone https://bob:urlpass@git.example.org/r.git", "git clone https://bob:<redacted 7 bytes>@git.example.org/r.git"},
		{`curl -H 'Authorization: Basic Ym9iOnB3' http://h/`, `curl -H 'Authorization: Basic <redacted 8 bytes>' http://h/`},
		{`curl --oauth2-bearer tok.en http://h/`, `curl --oauth2-bearer <redacted 6 bytes> http://h/`},
		{"curl -u admin:pw1 http://h/", "curl -u admin:<redacted 3 bytes> http://h/"},
		{"sshpass -p 'hunter2' ssh root@h", "sshpass -p <redacted 9 bytes> ssh root@h"},
		{"echo 'root:toor' | chpasswd && curl http://h/", "echo 'root:<redacted 4 bytes>' | chpasswd && curl http://h/"},
	} {
		if got := Command(tc.in); got != tc.want {
			t.Errorf("Command(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}
