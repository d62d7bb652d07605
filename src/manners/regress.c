/*
 * regress.c - several progress metrics: per-phase targets and ridge
 * regression on exponentially averaged sufficient statistics (MS Manners
 * §4.4, §6.3; the choices are in regress.h).
 */
#include <errno.h>
#include <stddef.h>

#include "manners/regress.h"

#define NS_PER_S 1e9
#define VALUE_MAX 1e300 /* rejects infinity along with everything absurd */

static int values_ok(const double *progress, int count)
{
	if (progress == NULL)
		return 0;
	for (int k = 0; k < count; k++)
		if (!(progress[k] >= 0.0 && progress[k] <= VALUE_MAX)) /* NaN fails too */
			return 0;
	return 1;
}

int manners_regress_init(struct manners_regress *regress, int count, uint32_t n, double nu)
{
	if (regress == NULL || count < 1 || count > MANNERS_REGRESS_MAX || n < 1 ||
	    !(nu >= 0.0 && nu < 1.0))
		return -EINVAL;
	regress->count = count;
	regress->n = n;
	regress->nu = nu;
	regress->trace_ridge = 0;
	regress->samples = 0;
	for (int i = 0; i < MANNERS_REGRESS_MAX; i++) {
		for (int j = 0; j < MANNERS_REGRESS_MAX; j++)
			regress->x[i][j] = 0.0;
		regress->y[i] = 0.0;
		regress->coef[i] = 0.0;
	}
	regress->solved = 0;
	return 0;
}

int manners_regress_add(struct manners_regress *regress, const double *progress,
			int64_t duration_ns)
{
	if (regress == NULL || regress->count < 1 || regress->count > MANNERS_REGRESS_MAX ||
	    duration_ns <= 0 || !values_ok(progress, regress->count))
		return -EINVAL;
	int m = regress->count;
	/* Plain sums for the first n testpoints (eq. 9, 10), then eq. 11, 12. */
	double xi = regress->samples < regress->n ? 1.0
						  : (double)(regress->n - 1) / (double)regress->n;
	double d = (double)duration_ns;
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < m; j++)
			regress->x[i][j] = xi * regress->x[i][j] + progress[i] * progress[j];
		regress->y[i] = xi * regress->y[i] + d * progress[i];
	}
	if (regress->samples < UINT64_MAX)  /* saturating, as calibrate.c's */
		regress->samples++;
	regress->solved = 0;
	return 0;
}

/*
 * Solves (X + nu Omega I) c = y over the metrics in active[0 .. m), by LDL'.
 * Entries of coef outside the active set are not touched.
 */
static int ridge_solve_active(const struct manners_regress *regress, const int *active, int m,
			      double omega, double *coef)
{
	double a[MANNERS_REGRESS_MAX][MANNERS_REGRESS_MAX];
	double l[MANNERS_REGRESS_MAX][MANNERS_REGRESS_MAX];
	double diag[MANNERS_REGRESS_MAX], z[MANNERS_REGRESS_MAX];
	for (int i = 0; i < m; i++) {
		for (int j = 0; j < m; j++)
			a[i][j] = regress->x[active[i]][active[j]];
		/* eq. 13 with eq. 14's Omega, or scaled to the metric's own units */
		a[i][i] += regress->nu * (regress->trace_ridge ? omega : a[i][i]);
	}

	for (int j = 0; j < m; j++) {
		double dj = a[j][j];
		for (int k = 0; k < j; k++)
			dj -= l[j][k] * l[j][k] * diag[k];
		if (!(dj > 0.0))
			return -EDOM;
		diag[j] = dj;
		l[j][j] = 1.0;
		for (int i = j + 1; i < m; i++) {
			double s = a[i][j];
			for (int k = 0; k < j; k++)
				s -= l[i][k] * l[j][k] * diag[k];
			l[i][j] = s / dj;
		}
	}
	/* L z = y, then D, then L' c = z. */
	for (int i = 0; i < m; i++) {
		double s = regress->y[active[i]];
		for (int k = 0; k < i; k++)
			s -= l[i][k] * z[k];
		z[i] = s;
	}
	for (int i = 0; i < m; i++)
		z[i] /= diag[i];
	for (int i = m - 1; i >= 0; i--) {
		double s = z[i];
		for (int k = i + 1; k < m; k++)
			s -= l[k][i] * coef[active[k]];
		if (!(s > -VALUE_MAX && s < VALUE_MAX))
			return -EDOM;
		coef[active[i]] = s;
	}
	return 0;
}

int manners_regress_solve(struct manners_regress *regress)
{
	if (regress == NULL || regress->count < 1 || regress->count > MANNERS_REGRESS_MAX)
		return -EINVAL;
	int m = regress->count;
	double omega = 0.0; /* eq. 14 */
	for (int k = 0; k < m; k++)
		omega += regress->x[k][k];
	if (!(omega > 0.0))
		return -EAGAIN;

	double coef[MANNERS_REGRESS_MAX] = { 0 };
	int active[MANNERS_REGRESS_MAX], n_active = 0;
	/* A metric that never progressed has no row to fit: cost 0. */
	for (int k = 0; k < m; k++)
		if (regress->x[k][k] > 0.0)
			active[n_active++] = k;
	/* Drop the most negative coefficient and solve again (regress.h). */
	for (;;) {
		int rc = ridge_solve_active(regress, active, n_active, omega, coef);
		if (rc < 0)
			return rc;
		int worst = -1;
		for (int i = 0; i < n_active; i++)
			if (coef[active[i]] < 0.0 &&
			    (worst < 0 || coef[active[i]] < coef[active[worst]]))
				worst = i;
		if (worst < 0)
			break;
		coef[active[worst]] = 0.0;
		for (int i = worst; i + 1 < n_active; i++)
			active[i] = active[i + 1];
		n_active--;
		if (n_active == 0)
			break;
	}
	for (int k = 0; k < MANNERS_REGRESS_MAX; k++)
		regress->coef[k] = k < m ? coef[k] : 0.0;
	regress->solved = 1;
	return 0;
}

int manners_regress_target_ns(struct manners_regress *regress, const double *progress,
			      double *target_ns)
{
	if (regress == NULL || target_ns == NULL || regress->count < 1 ||
	    regress->count > MANNERS_REGRESS_MAX || !values_ok(progress, regress->count))
		return -EINVAL;
	if (!regress->solved) {
		int rc = manners_regress_solve(regress);
		if (rc < 0)
			return rc;
	}
	double t = 0.0; /* eq. 8 */
	for (int k = 0; k < regress->count; k++)
		t += regress->coef[k] * progress[k];
	*target_ns = t;
	return 0;
}

int manners_phase_table_init(struct manners_phase_table *table, struct manners_phase *slots,
			     size_t capacity, const struct manners_calib_config *config,
			     double nu)
{
	if (table == NULL || slots == NULL || capacity == 0 || !(nu >= 0.0 && nu < 1.0))
		return -EINVAL;
	struct manners_calib probe; /* validates config */
	int rc = manners_calib_init(&probe, config);
	if (rc < 0)
		return rc;
	table->config = probe.config;
	table->nu = nu;
	table->slots = slots;
	table->capacity = capacity;
	table->used = 0;
	for (size_t i = 0; i < capacity; i++)
		slots[i].count = 0;
	return 0;
}

/* Spreads nearby indices (0, 1, 2 ... are the common case) over the table. */
static size_t index_hash(int index, size_t capacity)
{
	uint32_t h = (uint32_t)index * 2654435761u;
	return (size_t)(h ^ (h >> 16)) % capacity;
}

int manners_phase_lookup(struct manners_phase_table *table, int index, int count,
			 struct manners_phase **phase)
{
	if (table == NULL || phase == NULL || table->slots == NULL || table->capacity == 0 ||
	    count < 1 || count > MANNERS_REGRESS_MAX)
		return -EINVAL;
	size_t at = index_hash(index, table->capacity);
	for (size_t probe = 0; probe < table->capacity; probe++) {
		struct manners_phase *p = &table->slots[(at + probe) % table->capacity];
		if (p->count == 0) {
			int rc = manners_calib_init(&p->calib, &table->config);
			if (rc == 0)
				rc = manners_regress_init(&p->regress, count, table->config.n,
							  table->nu);
			if (rc < 0)
				return rc;
			p->index = index;
			p->count = count;
			p->quick_count = 0;
			table->used++;
			*phase = p;
			return 0;
		}
		if (p->index == index) {
			if (p->count != count)
				return -EINVAL;
			*phase = p;
			return 0;
		}
	}
	return -ENOSPC;
}

int manners_phase_update(struct manners_phase *phase, const double *progress,
			 int64_t duration_ns, int64_t now_ns)
{
	if (phase == NULL || phase->count < 1 || phase->count > MANNERS_REGRESS_MAX ||
	    !values_ok(progress, phase->count) || duration_ns <= 0)
		return -EINVAL;
	if (phase->count == 1) /* one metric: the rate average of eq. 4 */
		return manners_calib_sample(&phase->calib, progress[0], duration_ns, now_ns);
	int kept = manners_calib_gate(&phase->calib, duration_ns, now_ns);
	if (kept != 1)
		return kept;
	int rc = manners_regress_add(&phase->regress, progress, duration_ns);
	return rc < 0 ? rc : 1;
}

int manners_phase_below(struct manners_phase *phase, const double *progress,
			int64_t duration_ns)
{
	if (phase == NULL || phase->count < 1 || phase->count > MANNERS_REGRESS_MAX ||
	    !values_ok(progress, phase->count) || duration_ns <= 0)
		return -EINVAL;
	double target;
	if (phase->count == 1) {
		/* Rate below target <=> duration above progress / rate (§4.4). */
		if (phase->calib.samples == 0 || !(phase->calib.rate > 0.0))
			return -EAGAIN;
		target = progress[0] / phase->calib.rate * NS_PER_S;
	} else {
		int rc = manners_regress_target_ns(&phase->regress, progress, &target);
		if (rc < 0)
			return rc;
	}
	/* "At least as good as the target" is good (§4.1): equal is not below. */
	return (double)duration_ns > target;
}
