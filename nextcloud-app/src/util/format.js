/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Formatting for people: times in the browser's locale, durations, token counts, cost,
 * and where a task is in its attempts.
 */
import { getCanonicalLocale, n, t } from '@nextcloud/l10n'

/**
 * formatTime shows an RFC 3339 time, or a dash when unknown.
 *
 * @param {string|null|undefined} iso the time
 * @param {string} [timeZone] an IANA zone; the browser's when empty
 * @return {string}
 */
export function formatTime(iso, timeZone) {
	if (!iso) {
		return '–'
	}
	const d = new Date(iso)
	if (Number.isNaN(d.getTime())) {
		return '–'
	}
	const options = { dateStyle: 'medium', timeStyle: 'short' }
	try {
		return d.toLocaleString(getCanonicalLocale(), timeZone ? { ...options, timeZone } : options)
	} catch {
		// An unknown zone name: the browser's own zone is still right, just not labelled.
		return d.toLocaleString(getCanonicalLocale(), options)
	}
}

/**
 * formatDuration shows milliseconds as "850 ms", "12 s", "3 min 5 s" or "1 h 2 min".
 *
 * @param {number|null|undefined} ms the duration
 * @return {string}
 */
export function formatDuration(ms) {
	if (ms === null || ms === undefined || Number.isNaN(Number(ms)) || ms < 0) {
		return '–'
	}
	if (ms < 1000) {
		return t('istota', '{ms} ms', { ms: Math.round(ms) })
	}
	const total = Math.round(ms / 1000)
	const h = Math.floor(total / 3600)
	const m = Math.floor((total % 3600) / 60)
	const s = total % 60
	if (h > 0) {
		return t('istota', '{h} h {m} min', { h, m })
	}
	if (m > 0) {
		return t('istota', '{m} min {s} s', { m, s })
	}
	return t('istota', '{s} s', { s })
}

/**
 * formatNumber groups digits in the user's locale.
 *
 * @param {number} value the number
 * @return {string}
 */
export function formatNumber(value) {
	return new Intl.NumberFormat(getCanonicalLocale()).format(Number(value) || 0)
}

/**
 * formatTokens shows input and output tokens of a task or a period.
 *
 * @param {number} input input tokens
 * @param {number} output output tokens
 * @return {string}
 */
export function formatTokens(input, output) {
	const total = (Number(input) || 0) + (Number(output) || 0)
	return n('istota', '%n token', '%n tokens', total).replace(String(total), formatNumber(total))
		+ ' ' + t('istota', '({input} in, {output} out)', { input: formatNumber(input), output: formatNumber(output) })
}

/**
 * formatCost shows an estimated cost in US dollars.
 *
 * @param {number} usd the cost
 * @return {string}
 */
export function formatCost(usd) {
	return new Intl.NumberFormat(getCanonicalLocale(), { style: 'currency', currency: 'USD', maximumFractionDigits: 4 }).format(Number(usd) || 0)
}

/**
 * formatRetry says when a task that failed an attempt runs again, and as which attempt;
 * "" for a task that is not waiting to retry.
 *
 * @param {object} task a task of the status API (retry_at, attempts, max_attempts)
 * @param {string} [timeZone] an IANA zone; the browser's when empty
 * @return {string}
 */
export function formatRetry(task, timeZone) {
	if (!task || !task.retry_at) {
		return ''
	}
	return t('istota', 'Waiting to retry at {time}, attempt {attempt} of {max}', {
		time: formatTime(task.retry_at, timeZone),
		attempt: (Number(task.attempts) || 0) + 1,
		max: Number(task.max_attempts) || 0,
	})
}

/**
 * formatAttempt names the attempt a running task is making when it is a retry; "" for
 * a first attempt.
 *
 * @param {object} task a task of the status API (attempts, max_attempts)
 * @return {string}
 */
export function formatAttempt(task) {
	const attempt = Number(task?.attempts) || 0
	if (attempt < 2) {
		return ''
	}
	return t('istota', 'Attempt {attempt} of {max}', { attempt, max: Number(task.max_attempts) || 0 })
}

/**
 * formatConversation names a Talk conversation for the user looking at it. Talk's own
 * name of a one-to-one conversation is the JSON list of both user ids (`["alice","bob"]`),
 * which is what the bot is told; people see "Conversation with bob" instead.
 *
 * @param {string} name the conversation's name as Talk gave it
 * @param {string} [uid] the user looking at it, left out of the list
 * @return {string}
 */
export function formatConversation(name, uid) {
	let ids
	try {
		ids = JSON.parse(name)
	} catch {
		return name
	}
	if (!Array.isArray(ids) || ids.length === 0 || !ids.every((id) => typeof id === 'string')) {
		return name
	}
	const others = ids.filter((id) => id !== uid)
	return t('istota', 'Conversation with {names}', { names: (others.length ? others : ids).join(', ') })
}
