<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP;

interface IGroupManager {
	public function isAdmin($userId);

	public function isInGroup($userId, $group);

	public function groupExists($gid);

	/** @return list<string> */
	public function getUserGroupIds(IUser $user): array;
}
