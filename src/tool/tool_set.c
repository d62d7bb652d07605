/*
 * tool_set.c - `discnice set`: change the caps of a running class.  The
 * agent reads the caps on every call, so the change takes effect at once
 * (within one rate window, since bytes already in the window still count).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/rate.h"
#include "common/segment.h"
#include "tool/tool_class.h"
#include "policy/scavenger.h"
#include "tool/tool_msg.h"
#include "tool/tool_options.h"

enum { SET_HELP, SET_NET_POLICY, SET_NET_RATE, SET_RATE, SET_READ_RATE, SET_RECV_RATE, SET_SEND_RATE,
       SET_WRITE_RATE };

/* Sorted by long name; indexed by the enum above. */
static const struct command_option set_options[] = {
	[SET_HELP] = { "help", 'h', NULL, "show this help and exit" },
	[SET_NET_POLICY] = { "net-policy", 0, "cap|scavenger[=MS]",
			     "scavenger: pace sends so the queueing delay the class's TCP\n"
			     "connections add stays under MS (25-100, default 50); cap: stop\n"
			     "pacing by delay (the network caps alone)" },
	[SET_NET_RATE] = { "net-rate", 0, "RATE", "cap on socket bytes sent plus received" },
	[SET_RATE] = { "rate", 'r', "RATE", "cap on disk reads plus writes together" },
	[SET_READ_RATE] = { "read-rate", 0, "RATE", "cap on disk reads" },
	[SET_RECV_RATE] = { "recv-rate", 0, "RATE", "cap on socket bytes received" },
	[SET_SEND_RATE] = { "send-rate", 0, "RATE", "cap on socket bytes sent" },
	[SET_WRITE_RATE] = { "write-rate", 0, "RATE", "cap on disk writes (pages newly dirtied)" },
};
#define N_SET_OPTIONS (sizeof set_options / sizeof set_options[0])

static void set_help(void)
{
	printf("Usage: discnice set CLASS [--rate|--read-rate|--write-rate RATE]...\n"
	       "                          [--net-rate|--send-rate|--recv-rate RATE]...\n"
	       "                          [--net-policy cap|scavenger[=MS]]\n"
	       "Change the caps of running class CLASS (see 'discnice ls').  Every process of\n"
	       "every run in the class follows at once; caps not named stay as they are.\n\n");
	command_options_help(set_options, N_SET_OPTIONS);
	printf("\nRATE is as for 'discnice run': e.g. 5M, 5MiB/s, 500k; \"inf\" removes the cap.\n"
	       "At least one cap or --net-policy is required.  The network caps are a\n"
	       "budget of their own, independent of the disk caps.\n\n"
	       "A class of 'discnice attach' runs takes disk caps only (no agent polices\n"
	       "its sockets); one of 'discnice benice' takes none (it follows progress).\n\n"
	       "Exit status: 0; 2 for bad options, or caps the class cannot take; 3 if there\n"
	       "is no such class, or only attaches that are gone (killed) are left in it;\n"
	       "4 if its segment is corrupt or not yours; 125 on other\n"
	       "errors (the caps are set if only the line saying so could not be written).\n\n"
	       "Example:\n"
	       "  discnice set backup --read-rate 10MiB/s --write-rate inf\n"
	       "  discnice set backup --net-policy scavenger=25\n\n"
	       "See discnice(1).\n");
}

/* A cap named on the command line, parsed as `discnice run` parses it. */
struct cap_change {
	const char *name;      /* "read", "write", "total", "recv", "send", "net" */
	bool given;
	uint64_t bps;          /* 0 = no cap */
};

static void parse_cap(struct cap_change *change, const char *value, const char *flag)
{
	int rc = rate_parse(value, &change->bps);
	if (rc < 0)
		command_usage_error("set", "%s '%s': %s", flag, value, rate_error(rc));
	change->given = true;
}

int tool_set(int argc, char **argv)
{
	/* The order of the fields below. */
	struct cap_change changes[6] = { { "read", false, 0 }, { "write", false, 0 },
					 { "total", false, 0 }, { "recv", false, 0 },
					 { "send", false, 0 }, { "net", false, 0 } };
	uint64_t scavenger_target_ns = 0;
	bool net_policy_given = false;
	int opt;
	while ((opt = command_option_next("set", set_options, N_SET_OPTIONS, false, argc, argv)) >= 0) {
		switch (opt) {
		case SET_HELP:
			set_help();
			return 0;
		case SET_READ_RATE:
			parse_cap(&changes[0], optarg, "--read-rate");
			break;
		case SET_WRITE_RATE:
			parse_cap(&changes[1], optarg, "--write-rate");
			break;
		case SET_RATE:
			parse_cap(&changes[2], optarg, "--rate");
			break;
		case SET_RECV_RATE:
			parse_cap(&changes[3], optarg, "--recv-rate");
			break;
		case SET_SEND_RATE:
			parse_cap(&changes[4], optarg, "--send-rate");
			break;
		case SET_NET_RATE:
			parse_cap(&changes[5], optarg, "--net-rate");
			break;
		case SET_NET_POLICY: {
			int rc = net_policy_parse(optarg, &scavenger_target_ns);
			if (rc == -ERANGE)
				command_usage_error("set", "--net-policy '%s': the scavenger's target is "
						    "25 to 100 ms (RFC 6817 allows at most 100)", optarg);
			if (rc < 0)
				command_usage_error("set", "--net-policy '%s': expected cap, scavenger or "
						    "scavenger=MS (e.g. scavenger=50)", optarg);
			net_policy_given = true;
			break;
		}
		}
	}
	if (optind >= argc)
		command_usage_error("set", "no class given (usage: discnice set CLASS "
				    "[--rate|--read-rate|--write-rate RATE]... "
				    "[--net-rate|--send-rate|--recv-rate RATE]... [--net-policy P])");
	if (optind + 1 < argc)
		command_usage_error("set", "unexpected argument '%s'", argv[optind + 1]);
	bool any = net_policy_given;
	for (int i = 0; i < 6; i++)
		any |= changes[i].given;
	if (!any)
		command_usage_error("set", "no cap given: use --rate, --read-rate, --write-rate, "
				    "--net-rate, --send-rate, --recv-rate (\"inf\" removes a cap) or "
				    "--net-policy");
	const char *name = argv[optind];
	if (!segment_name_ok(name))
		command_usage_error("set", "'%s': " SEGMENT_NAME_RULE, name);

	struct dn_segment *seg;
	int status = class_open(name, &seg);
	if (status)
		return status;
	/* Caps only an agent enforces are refused where no run has one: a
	 * class of `attach` runs is held from outside, by its disk count (no
	 * network cap, no scavenger); one of benice's is regulated by
	 * progress, by no cap at all.  Accepted, they did nothing. */
	unsigned with_agent = 0, attached = 0, attached_alive = 0, benice = 0;
	uint32_t gone_pid = 0;
	for (unsigned i = 0; i < DN_MAX_RUNS; i++) {
		uint32_t pid = __atomic_load_n(&seg->runs[i].pid, __ATOMIC_ACQUIRE);
		if (!pid)
			continue;
		switch (segment_run_kind(&seg->runs[i])) {
		case RUN_KIND_BENICE:
			benice++;
			break;
		case RUN_KIND_ATTACH:
			attached++;
			if (segment_run_alive(&seg->runs[i]))
				attached_alive++;
			else
				gone_pid = pid;
			break;
		case RUN_KIND_AGENT:
			with_agent++;
			break;
		}
	}
	/* An attach's processes are held by it alone: with it gone (killed),
	 * a cap set here reaches nobody - said, not reported as changed.  (A
	 * run's job keeps its agent, which reads the caps, after its
	 * supervisor is killed.) */
	if (!with_agent && !benice && attached && !attached_alive) {
		class_close(seg);
		errorf("class '%s': its attach (discnice %u) is gone, and nothing holds its "
		       "processes any more; the class is removed at the next 'discnice run'",
		       name, gone_pid);
		return EXIT_NO_CLASS;
	}
	bool net = net_policy_given || changes[3].given || changes[4].given || changes[5].given;
	if (!with_agent && !attached && benice) {
		class_close(seg);
		command_usage_error("set", "class '%s' is regulated by benice, by its progress: it "
				    "has no caps to set", name);
	}
	if (!with_agent && attached && net) {
		class_close(seg);
		command_usage_error("set", "class '%s' holds attached processes, from outside: "
				    "attach caps their disk I/O only (network caps need "
				    "'discnice run')", name);
	}
	uint64_t *fields[6] = { &seg->caps.read_bps, &seg->caps.write_bps, &seg->caps.total_bps,
				&seg->net_caps.read_bps, &seg->net_caps.write_bps,
				&seg->net_caps.total_bps };
	uint64_t old[6];
	uint64_t token = segment_lock(seg);
	for (int i = 0; i < 6; i++) {
		old[i] = *fields[i];
		if (changes[i].given)
			__atomic_store_n(fields[i], changes[i].bps, __ATOMIC_RELAXED);
	}
	uint64_t old_target = seg->scavenger.target_ns;
	if (net_policy_given && scavenger_target_ns != old_target) {
		/* A new target starts the controller afresh (from
		 * SCAVENGER_START_BPS); "cap" turns it off, and the agents
		 * stop folding its rate into the send cap at their next call. */
		if (old_target && scavenger_target_ns) {
			__atomic_store_n(&seg->scavenger.target_ns, scavenger_target_ns,
					 __ATOMIC_RELAXED);
		} else {
			scavenger_init(&seg->scavenger, scavenger_target_ns);
		}
	}
	segment_unlock(seg, token);
	class_close(seg);
	if (net_policy_given) {
		char before[32] = "cap", after[32] = "cap";
		if (old_target)
			snprintf(before, sizeof before, "scavenger=%.0f", (double)old_target / 1e6);
		if (scavenger_target_ns)
			snprintf(after, sizeof after, "scavenger=%.0f", (double)scavenger_target_ns / 1e6);
		printf("class %s: network policy %s%s%s%s\n", name, old_target == scavenger_target_ns ? "" : before,
		       old_target == scavenger_target_ns ? "" : " -> ", after,
		       old_target == scavenger_target_ns ? " (unchanged)" : "");
	}

	for (int i = 0; i < 6; i++) {
		if (!changes[i].given)
			continue;
		char before[24], after[24];
		class_cap_text(before, sizeof before, old[i]);
		class_cap_text(after, sizeof after, changes[i].bps);
		if (old[i] == changes[i].bps)
			printf("class %s: %s cap %s (unchanged)\n", name, changes[i].name, after);
		else
			printf("class %s: %s cap %s -> %s\n", name, changes[i].name, before, after);
	}
	return 0;
}
