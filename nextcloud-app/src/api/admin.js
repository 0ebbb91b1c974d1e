/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Wrappers for the admin page's routes (docs/user-api.md, "Admin").
 */
import { request } from './client.js'

/** @return {Promise<object>} the sidecar's health (version, queue, workers, sandbox, …) */
export const getHealth = () => request('GET', 'admin/health')

/** @return {Promise<{settings: object, restart_required: Array<string>}>} */
export const getAdminSettings = () => request('GET', 'admin/settings')

/**
 * putAdminSettings stores a partial AdminSettings. `brain.api_key` is sent only when the
 * caller put it in the patch: an absent key leaves the stored one unchanged.
 *
 * @param {object} patch partial AdminSettings
 * @return {Promise<{settings: object, restart_required: Array<string>}>}
 */
export const putAdminSettings = (patch) => request('PUT', 'admin/settings', { data: patch })
