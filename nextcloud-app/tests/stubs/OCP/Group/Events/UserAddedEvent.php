<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\Group\Events;

use OCP\EventDispatcher\Event;
use OCP\IUser;

/** The group itself is left out: the app only needs the user. */
class UserAddedEvent extends Event {
	public function __construct(
		private IUser $user,
	) {
	}

	public function getUser(): IUser {
		return $this->user;
	}
}
