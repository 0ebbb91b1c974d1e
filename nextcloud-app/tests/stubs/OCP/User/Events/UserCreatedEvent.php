<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Test stub: hand-written minimal signature of Nextcloud OCP stable31, only what the app uses.
 */

namespace OCP\User\Events;

use OCP\EventDispatcher\Event;
use OCP\IUser;

class UserCreatedEvent extends Event {
	public function __construct(
		private IUser $user,
		private string $password = '',
	) {
	}

	public function getUser(): IUser {
		return $this->user;
	}
}
