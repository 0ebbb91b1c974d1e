/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Wrappers for the personal page's routes (docs/user-api.md, "App OCS API"). The app
 * takes the user from the session: no call names a user.
 */
import { request, seg } from './client.js'

/** @return {Promise<{allowed: boolean, istota_admin: boolean, bot_name: string, files_path: string}>} */
export const getMe = () => request('GET', 'me')

/** @return {Promise<object>} running, queued, recent, usage, timezone */
export const getStatus = () => request('GET', 'me/status')

/**
 * @param {number} taskId the task
 * @param {number} after the last sequence number already shown
 * @return {Promise<{events: Array<object>, status: string}>}
 */
export const getTaskEvents = (taskId, after = 0) => request('GET', `me/tasks/${seg(taskId)}/events`, { params: { after } })

/** @return {Promise<{stopped: number, dropped: number}>} */
export const stopTasks = () => request('POST', 'me/stop')

/** @return {Promise<{token: string, url: string, expires_in: number}>} */
export const mintWsToken = () => request('POST', 'me/ws-token')

/** @return {Promise<{content: string, etag: string}>} */
export const getUserMemory = () => request('GET', 'me/memory/user')

/**
 * @param {string} content the new USER.md
 * @param {string} etag the ETag the edit started from
 * @return {Promise<{etag: string}>}
 */
export const putUserMemory = (content, etag) => request('PUT', 'me/memory/user', { data: { content, etag } })

/** @param {number} limit newest entries @return {Promise<{entries: Array<object>}>} */
export const getAudit = (limit = 50) => request('GET', 'me/memory/audit', { params: { limit } })

/** @return {Promise<{channels: Array<{token: string, name: string, content: string}>}>} */
export const getChannels = () => request('GET', 'me/memory/channels')

/** @param {number} days how far back @return {Promise<{days: Array<{date: string, content: string}>}>} */
export const getDated = (days = 30) => request('GET', 'me/memory/dated', { params: { days } })

/** @return {Promise<{facts: Array<object>}>} */
export const getFacts = () => request('GET', 'me/memory/facts')

/** @param {number} id fact id @return {Promise<{ok: boolean}>} */
export const invalidateFact = (id) => request('POST', `me/memory/facts/${seg(id)}/invalidate`)

/** @param {number} id fact id @return {Promise<{ok: boolean}>} */
export const deleteFact = (id) => request('DELETE', `me/memory/facts/${seg(id)}`)

/**
 * @param {string} q the words to look for
 * @param {number} limit most results
 * @return {Promise<{results: Array<object>}>}
 */
export const searchMemory = (q, limit = 20) => request('GET', 'me/memory/search', { params: { q, limit } })

/** @return {Promise<object>} jobs, cron_file, checks, heartbeat_file, briefings, briefings_file */
export const getSchedule = () => request('GET', 'me/schedule')

/** Actions a user may take on one CRON.md job. */
export const JOB_ACTIONS = ['enable', 'disable', 'run']

/**
 * @param {string} name the job's name
 * @param {'enable'|'disable'|'run'} action what to do
 * @return {Promise<object>} the job as it is now
 */
export function jobAction(name, action) {
	if (!JOB_ACTIONS.includes(action)) {
		return Promise.reject(new TypeError(`unknown job action ${action}`))
	}
	return request('POST', `me/schedule/jobs/${seg(name)}/${action}`)
}

/** @return {Promise<object>} persona, timezone, emails, calendars, files_path */
export const getSettings = () => request('GET', 'me/settings')

/** @param {object} patch any of persona, timezone, emails, calendars @return {Promise<object>} */
export const putSettings = (patch) => request('PUT', 'me/settings', { data: patch })

/** GET /me/approvals → {pending, recent, policies: {admin, user, effective}, timeout_seconds} */
export const getApprovals = () => request('GET', 'me/approvals')

/**
 * decideApproval answers one question of the agent's.
 *
 * @param {number} id the question
 * @param {boolean} approve yes or no
 * @return {Promise<object>} the answered request
 */
export const decideApproval = (id, approve) => request('POST', `me/approvals/${seg(id)}`, { data: { approve } })

/**
 * putApprovalPolicies stores the user's own policies ("" follows the administrator's);
 * the service refuses any that would loosen the administrator's.
 *
 * @param {object} policies read, write_own, external, admin
 * @return {Promise<object>} {admin, user, effective}
 */
export const putApprovalPolicies = (policies) => request('PUT', 'me/approvals/policies', { data: policies })

/** @return {Promise<object>} connected, host, port, tls, username, connected_at, checked_at, ok, last_error, messages, unseen */
export const getMailbox = () => request('GET', 'me/mailbox')

/**
 * connectMailbox logs in with the account and keeps it when that works. The password is
 * sent once and never comes back; '' keeps the stored one for the same server and user.
 *
 * @param {{host: string, port: number, tls: string, username: string, password: string}} account the account
 * @return {Promise<object>} the mailbox as getMailbox shows it
 */
export const putMailbox = (account) => request('PUT', 'me/mailbox', { data: account })

/** @return {Promise<object>} the mailbox after a login just now */
export const testMailbox = () => request('POST', 'me/mailbox/test')

/** @return {Promise<object>} {connected: false} */
export const deleteMailbox = () => request('DELETE', 'me/mailbox')
